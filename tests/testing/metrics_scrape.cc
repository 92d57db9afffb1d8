#include "tests/testing/metrics_scrape.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace walfeed::testing {

absl::StatusOr<std::string> HttpGet(int port, const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    const std::string error = strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect to port ", port, ": ", error));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("could not send the request");
  }
  std::string response;
  char buffer[16384];
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    pollfd ready{fd, POLLIN, 0};
    if (left <= absl::ZeroDuration() ||
        poll(&ready, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) <= 0) {
      close(fd);
      return absl::DeadlineExceededError(absl::StrCat("no complete answer within ", absl::FormatDuration(timeout)));
    }
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    response.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) return absl::DataLossError("no HTTP header end");
  const std::string status_line = response.substr(0, response.find("\r\n"));
  if (!absl::StrContains(status_line, " 200 ")) {
    return absl::FailedPreconditionError(absl::StrCat("HTTP answer: ", status_line));
  }
  return response.substr(body + 4);
}

namespace {

bool ParseValue(absl::string_view text, double* value) {
  if (text == "+Inf") {
    *value = INFINITY;
  } else if (text == "-Inf") {
    *value = -INFINITY;
  } else if (text == "NaN") {
    *value = NAN;
  } else {
    return absl::SimpleAtod(text, value);
  }
  return true;
}

bool IsNameChar(char c, bool first) {
  return absl::ascii_isalpha(c) || c == '_' || c == ':' || (!first && absl::ascii_isdigit(c));
}

}  // namespace

absl::StatusOr<MetricsScrape> MetricsScrape::Parse(absl::string_view text) {
  MetricsScrape scrape;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", number, " (", why, "): ", line));
    };
    if (line.empty()) continue;
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      if (parts.size() != 2) return bad("TYPE needs a name and a type");
      scrape.types_[parts[0]] = parts[1];
      continue;
    }
    if (line[0] == '#') continue;
    MetricSample sample;
    size_t i = 0;
    while (i < line.size() && IsNameChar(line[i], i == 0)) ++i;
    if (i == 0) return bad("no metric name");
    sample.name = std::string(line.substr(0, i));
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t start = i;
        while (i < line.size() && IsNameChar(line[i], i == start)) ++i;
        const std::string label(line.substr(start, i - start));
        if (label.empty() || line.substr(i, 2) != "=\"") return bad("label without =\"");
        i += 2;
        std::string value;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
          ++i;
        }
        if (i >= line.size()) return bad("unterminated label value");
        ++i;  // Closing quote.
        sample.labels[label] = value;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return bad("no }");
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') return bad("no space before the value");
    std::vector<absl::string_view> rest = absl::StrSplit(line.substr(i + 1), ' ');
    if (rest.empty() || rest.size() > 2 || !ParseValue(rest[0], &sample.value)) {
      return bad("the value is not a number");
    }
    scrape.samples_.push_back(std::move(sample));
  }
  return scrape;
}

std::optional<double> MetricsScrape::Value(const std::string& name,
                                           const std::map<std::string, std::string>& labels) const {
  std::optional<double> found;
  for (const MetricSample& sample : samples_) {
    if (sample.name != name) continue;
    bool match = true;
    for (const auto& [label, value] : labels) {
      auto it = sample.labels.find(label);
      match = match && it != sample.labels.end() && it->second == value;
    }
    if (!match) continue;
    if (found) {
      ADD_FAILURE() << "more than one sample of " << name << " matches the labels";
      return std::nullopt;
    }
    found = sample.value;
  }
  return found;
}

std::vector<MetricSample> MetricsScrape::Samples(const std::string& name) const {
  std::vector<MetricSample> out;
  for (const MetricSample& sample : samples_) {
    if (sample.name == name) out.push_back(sample);
  }
  return out;
}

std::string MetricsScrape::TypeOf(const std::string& family) const {
  auto it = types_.find(family);
  return it == types_.end() ? "" : it->second;
}

absl::StatusOr<MetricsScrape> ScrapeMetrics(int port) {
  absl::StatusOr<std::string> body = HttpGet(port, "/metrics");
  if (!body.ok()) return body.status();
  return MetricsScrape::Parse(*body);
}

}  // namespace walfeed::testing
