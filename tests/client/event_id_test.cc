// walfeed::EventId (the client's) must agree with replication::EventId (the
// server's) on every input: what parses, to which value, how it prints and how
// ids order. Otherwise "at or below my checkpoint" would differ between a
// consumer and the server. Checked on hand-picked edge cases and on a large
// deterministic set of generated strings and ids.
#include "walfeed/event_id.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/event_id.h"
#include "tests/testing/status_matchers.h"

namespace walfeed {
namespace {

using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

// Both parsers on one input: same verdict, and for a valid id the same value
// and canonical text.
void ExpectAgreement(const std::string& text) {
  SCOPED_TRACE(absl::StrCat("input \"", absl::CHexEscape(text), "\""));
  const absl::StatusOr<EventId> ours = EventId::Parse(text);
  const absl::StatusOr<replication::EventId> server = replication::EventId::Parse(text);
  ASSERT_EQ(ours.ok(), server.ok()) << "client: " << ours.status() << "; server: " << server.status();
  if (!ours.ok()) {
    EXPECT_EQ(ours.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(ours.status().message()),
                HasSubstr("expected <commit_lsn>:<index> like 0/1A2B3C8:0"));
    EXPECT_THAT(std::string(ours.status().message()), HasSubstr(absl::CHexEscape(text)));
    return;
  }
  EXPECT_EQ(ours->commit_lsn(), server->commit_lsn.value());
  EXPECT_EQ(ours->index(), server->index);
  EXPECT_EQ(ours->ToString(), server->ToString());
  EXPECT_EQ(ours->CommitLsnText(), server->commit_lsn.ToString());
}

TEST(ClientEventIdTest, ParsesFormatsAndExposesParts) {
  absl::StatusOr<EventId> id = EventId::Parse("0/1A2B3C8:0");
  ASSERT_THAT(id, IsOk());
  EXPECT_EQ(id->commit_lsn(), 0x1A2B3C8u);
  EXPECT_EQ(id->index(), 0u);
  EXPECT_EQ(id->ToString(), "0/1A2B3C8:0");
  EXPECT_EQ(id->CommitLsnText(), "0/1A2B3C8");
  EXPECT_EQ(EventId::Parse("16/b374d848:4294967295")->ToString(), "16/B374D848:4294967295");
  EXPECT_EQ(EventId(0x16B374D848u, 3).ToString(), "16/B374D848:3");
  EXPECT_EQ(EventId().ToString(), "0/0:0");
}

TEST(ClientEventIdTest, RejectsMalformedIdsNamingTheInputAndTheForm) {
  EXPECT_THAT(EventId::Parse("0/1A2B3C8"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("\"0/1A2B3C8\""), HasSubstr("missing ':'"),
                                        HasSubstr("like 0/1A2B3C8:0"))));
  EXPECT_THAT(EventId::Parse("0/1A2B3C8:4294967296"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("32 bits")));
  EXPECT_THAT(EventId::Parse("0/1A2B3C8\n:1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0/1A2B3C8\\n:1")));
}

TEST(ClientEventIdTest, AgreesWithTheServerOnEdgeCases) {
  const std::vector<std::string> inputs = {
      // Valid.
      "0/0:0", "0/1A2B3C8:0", "0/1a2b3c8:0", "0/1A2b3C8:17", "FFFFFFFF/FFFFFFFF:4294967295",
      "ffffffff/ffffffff:4294967295", "1/00000000:1", "00000001/0:0", "0/01A2B3C8:7",
      "0/1:0000000001", "0/1:0000000000", "0/1:4294967295", "00000000/00000000:0",
      "16/B374D848:12",
      // Invalid.
      "", ":", "::", "/", "/:", "0/1", "0/1:", ":0", "0/1:-1", "0/1:+1", "+0/1:0", "-0/1:0",
      " 0/1:0", "0/1:0 ", "0/1: 0", "0 /1:0", "0/ 1:0", "0/1 :0", "0x0/1:0", "0/0x1:0",
      "0/1:0x1", "123456789/0:0", "0/123456789:0", "0/1:4294967296", "0/1:9999999999",
      "0/1:12345678901", "0/1:00000000001", "0/1:1.0", "0/1:1e3", "0//1:0", "0/1/2:0",
      "/1:0", "0/:0", "0/1:0:0", "0/1::0", "0/G:0", "G/0:0", "0/1:a", "0/1:A",
      "\xEF\xBC\x90/1:0", std::string("0/1\0:0", 6), std::string("0/1:0\0", 6), "0/1;0",
      "0-1:0", "0\\1:0", "0/1:0\n", "\t0/1:0", "0/1:٣",
  };
  for (const std::string& input : inputs) ExpectAgreement(input);
}

TEST(ClientEventIdTest, AgreesWithTheServerOnGeneratedStrings) {
  // Strings over the characters that matter (digits, hex in both cases, the
  // separators, signs, space, 'x'), biased towards almost-valid shapes.
  std::mt19937_64 random(20240501);
  const std::string alphabet = "0123456789abcdefABCDEFgG/:+- x";
  auto pick = [&](const std::string& from) {
    return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(random)];
  };
  auto run = [&](size_t max_length, const std::string& from) {
    std::string text;
    const size_t length = std::uniform_int_distribution<size_t>(0, max_length)(random);
    for (size_t i = 0; i < length; ++i) text.push_back(pick(from));
    return text;
  };
  int valid = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string text;
    switch (i % 3) {
      case 0:  // Anything.
        text = run(24, alphabet);
        break;
      case 1:  // X/Y:N with parts of random length over hex digits.
        text = absl::StrCat(run(10, "0123456789abcdefABCDEF"), "/", run(10, "0123456789abcdefABCDEF"),
                            ":", run(12, "0123456789"));
        break;
      default:  // Like case 1 with one character replaced.
        text = absl::StrCat(run(9, "0123456789ABCDEF"), "/", run(9, "0123456789ABCDEF"), ":",
                            run(11, "0123456789"));
        if (!text.empty()) {
          text[std::uniform_int_distribution<size_t>(0, text.size() - 1)(random)] = pick(alphabet);
        }
    }
    ExpectAgreement(text);
    if (EventId::Parse(text).ok()) ++valid;
    if (::testing::Test::HasFailure()) return;  // One report, not thousands.
  }
  EXPECT_GT(valid, 10000) << "the generator should produce plenty of valid ids too";
}

TEST(ClientEventIdTest, FormatsAndOrdersLikeTheServerForRandomIds) {
  std::mt19937_64 random(7);
  // Values concentrated where the order is subtle: equal LSNs, neighbouring
  // indexes, halves with and without leading digits.
  auto lsn = [&]() -> uint64_t {
    switch (random() % 4) {
      case 0:
        return random() % 4;
      case 1:
        return random() & 0xFFFFFFFFu;
      case 2:
        return (random() % 3) << 32 | (random() % 0x100);
      default:
        return random();
    }
  };
  auto index = [&]() -> uint32_t {
    return random() % 2 ? static_cast<uint32_t>(random() % 3) : static_cast<uint32_t>(random());
  };
  for (int i = 0; i < 100000; ++i) {
    const EventId a(lsn(), index());
    const EventId b = random() % 5 == 0 ? EventId(a.commit_lsn(), index()) : EventId(lsn(), index());
    const replication::EventId sa{replication::Lsn(a.commit_lsn()), a.index()};
    const replication::EventId sb{replication::Lsn(b.commit_lsn()), b.index()};
    ASSERT_EQ(a.ToString(), sa.ToString());
    ASSERT_EQ(EventId::Parse(sa.ToString()).value(), a);
    ASSERT_EQ(a < b, sa < sb) << a << " vs " << b;
    ASSERT_EQ(a == b, sa == sb) << a << " vs " << b;
    ASSERT_EQ(a <= b, sa <= sb) << a << " vs " << b;
    ASSERT_EQ(a > b, sa > sb) << a << " vs " << b;
  }
}

TEST(ClientEventIdTest, OrdersNumericallyNotAsText) {
  const EventId a = EventId::Parse("0/A:0").value();
  const EventId b = EventId::Parse("0/10:0").value();
  EXPECT_LT(a, b);
  EXPECT_GT(std::string("0/A:0"), std::string("0/10:0")) << "as text the order is the other way";
  EXPECT_LT(EventId::Parse("0/10:9").value(), EventId::Parse("0/10:10").value());
  EXPECT_LT(EventId::Parse("0/FFFFFFFF:4294967295").value(), EventId::Parse("1/0:0").value());
  EXPECT_EQ(EventId::Parse("0/a:1").value(), EventId::Parse("0/0000000A:1").value());
  absl::flat_hash_set<EventId> set = {EventId(1, 2), EventId(1, 2), EventId(2, 1)};
  EXPECT_EQ(set.size(), 2u);
}

}  // namespace
}  // namespace walfeed
