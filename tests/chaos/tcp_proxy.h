// TcpProxy: a loopback TCP proxy between the consumers and walfeed-server that
// can break the network on demand: reset every connection (RST, as after a
// peer's crash or a NAT drop), stall one or both directions (a black hole: bytes
// stop moving, nothing is closed), or both in turn.
//
// Each connection has one thread per direction; they wait on poll() with a short
// timeout so a stall or reset takes effect within it.
#ifndef WALFEED_TESTS_CHAOS_TCP_PROXY_H_
#define WALFEED_TESTS_CHAOS_TCP_PROXY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace walfeed::chaos {

class TcpProxy {
 public:
  enum Direction { kToServer = 1, kToClient = 2, kBoth = 3 };

  // Listens on a free loopback port.
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start();
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }
  // Where new connections go (the server's port changes when it restarts).
  void SetUpstream(int port) { upstream_port_ = port; }

  // Aborts every open connection with a reset on both sides.
  void ResetAll();
  // Stops moving bytes in `direction` until `until`; connections stay open.
  void Stall(Direction direction, absl::Time until);
  int connections_accepted() const { return accepted_; }

 private:
  struct Connection;
  TcpProxy(int listen_fd, int port);
  void AcceptLoop();
  void Pump(const std::shared_ptr<Connection>& connection, bool to_server);
  bool Stalled(bool to_server) const;

  const int listen_fd_;
  const int port_;
  std::atomic<int> upstream_port_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> stall_to_server_until_ns_{0};
  std::atomic<int64_t> stall_to_client_until_ns_{0};
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walfeed::chaos

#endif  // WALFEED_TESTS_CHAOS_TCP_PROXY_H_
