// How the live clients (walfeed_live through walfeed, direct_live straight
// from the slot) report commit -> receive latencies, so that the two lines
// compare field for field.
#ifndef WALFEED_BENCH_LATENCY_SUMMARY_H_
#define WALFEED_BENCH_LATENCY_SUMMARY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace walfeed::bench {

// Microseconds since the Unix epoch on the wall clock, the clock PostgreSQL's
// commit timestamps are taken from (one host, one clock).
int64_t WallMicros();

// JSON object fields, without the braces: "events", "transactions", their
// rates over `seconds`, and the latencies' p50/p90/p99/p99.9/max/min in
// milliseconds (-1 when there are none). Sorts `latencies_us`.
std::string LatencyFields(std::vector<int64_t>& latencies_us, uint64_t transactions,
                          double seconds);

}  // namespace walfeed::bench

#endif  // WALFEED_BENCH_LATENCY_SUMMARY_H_
