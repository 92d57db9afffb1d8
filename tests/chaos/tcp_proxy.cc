#include "tests/chaos/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace walfeed::chaos {

struct TcpProxy::Connection {
  int client_fd = -1;
  int server_fd = -1;
  std::atomic<bool> reset{false};
  std::atomic<int> pumps_running{2};
  std::thread to_server;
  std::thread to_client;
};

namespace {

constexpr int kPollMs = 20;

sockaddr_in Loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// Closing with a zero linger sends RST instead of FIN: the peer sees
// "connection reset", as after a crash or a middlebox drop.
void CloseWithReset(int fd) {
  linger hard{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
  close(fd);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address = Loopback(0);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, 64) != 0) {
    close(fd);
    return absl::InternalError("bind/listen failed");
  }
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return std::unique_ptr<TcpProxy>(new TcpProxy(fd, ntohs(address.sin_port)));
}

TcpProxy::TcpProxy(int listen_fd, int port) : listen_fd_(listen_fd), port_(port) {
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

TcpProxy::~TcpProxy() {
  stopping_ = true;
  acceptor_.join();
  ResetAll();
  close(listen_fd_);
}

void TcpProxy::AcceptLoop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, kPollMs) <= 0) continue;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address = Loopback(upstream_port_);
    if (server < 0 || connect(server, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      // Nothing listens (the server is down): refuse as a dead server would.
      if (server >= 0) close(server);
      CloseWithReset(client);
      continue;
    }
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ++accepted_;
    auto connection = std::make_shared<Connection>();
    connection->client_fd = client;
    connection->server_fd = server;
    connection->to_server = std::thread([this, connection] { Pump(connection, true); });
    connection->to_client = std::thread([this, connection] { Pump(connection, false); });
    std::vector<std::shared_ptr<Connection>> finished;
    {
      absl::MutexLock lock(&mu_);
      // Reap connections whose pumps both ended, so threads do not pile up.
      std::vector<std::shared_ptr<Connection>> alive;
      for (auto& c : connections_) {
        (c->pumps_running == 0 ? finished : alive).push_back(std::move(c));
      }
      alive.push_back(connection);
      connections_ = std::move(alive);
    }
    for (auto& c : finished) {
      c->to_server.join();
      c->to_client.join();
      close(c->client_fd);
      close(c->server_fd);
    }
  }
}

bool TcpProxy::Stalled(bool to_server) const {
  const int64_t until = to_server ? stall_to_server_until_ns_ : stall_to_client_until_ns_;
  return absl::ToUnixNanos(absl::Now()) < until;
}

void TcpProxy::Pump(const std::shared_ptr<Connection>& c, bool to_server) {
  const int from = to_server ? c->client_fd : c->server_fd;
  const int to = to_server ? c->server_fd : c->client_fd;
  char buffer[16384];
  while (!c->reset) {
    if (Stalled(to_server)) {
      // A black hole: leave the bytes in the kernel; the sender's window fills.
      // Wait only for the socket to fail, until the next check of the stall.
      pollfd hangup{from, 0, 0};
      poll(&hangup, 1, kPollMs);
      continue;
    }
    pollfd p{from, POLLIN, 0};
    const int ready = poll(&p, 1, kPollMs);
    if (ready <= 0) continue;
    const ssize_t n = read(from, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // An orderly or abortive end on one side: pass the end on.
      shutdown(to, SHUT_WR);
      break;
    }
    ssize_t done = 0;
    while (done < n && !c->reset) {
      const ssize_t w =
          send(to, buffer + done, static_cast<size_t>(n - done), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        // The receiver is slow: wait for room, but notice a reset meanwhile.
        pollfd room{to, POLLOUT, 0};
        poll(&room, 1, kPollMs);
        continue;
      }
      if (w < 0) {
        c->reset = true;
        break;
      }
      done += w;
    }
  }
  --c->pumps_running;
}

void TcpProxy::ResetAll() {
  std::vector<std::shared_ptr<Connection>> all;
  {
    absl::MutexLock lock(&mu_);
    all.swap(connections_);
  }
  for (auto& c : all) c->reset = true;
  for (auto& c : all) {
    c->to_server.join();
    c->to_client.join();
    CloseWithReset(c->client_fd);
    CloseWithReset(c->server_fd);
  }
}

void TcpProxy::Stall(Direction direction, absl::Time until) {
  const int64_t ns = absl::ToUnixNanos(until);
  if (direction & kToServer) stall_to_server_until_ns_ = ns;
  if (direction & kToClient) stall_to_client_until_ns_ = ns;
}

}  // namespace walfeed::chaos
