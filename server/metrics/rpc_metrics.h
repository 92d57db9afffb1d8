// RpcMetrics: gRPC calls by service, method and status code, counted by a
// server interceptor (every service: ChangeStream, health, reflection).
//
//   walfeed_grpc_server_started_total{grpc_service, grpc_method}
//   walfeed_grpc_server_handled_total{grpc_service, grpc_method, grpc_code}
//   walfeed_grpc_server_handling_seconds{grpc_service, grpc_method}  (unary only:
//       a Subscribe lasts as long as its client stays, which is no latency)
//
// Method names come from the client: only the methods in `known` get their
// own label, anything else counts as grpc_method="unknown", so a client
// calling random names cannot grow the series without bound.
#ifndef WALFEED_SERVER_METRICS_RPC_METRICS_H_
#define WALFEED_SERVER_METRICS_RPC_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace walfeed::server::metrics {

class RpcMetrics {
 public:
  // `known`: full method names, "/package.Service/Method".
  RpcMetrics(prometheus::Registry& registry, std::vector<std::string> known);

  // For grpc::ServerBuilder::experimental().SetInterceptorCreators; the
  // factory refers to this object, which must outlive the gRPC server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

  // A call to `method` (as gRPC names it) started / ended with `code`;
  // `seconds` is its duration, recorded for unary calls only.
  void Started(const std::string& method);
  void Handled(const std::string& method, bool unary, grpc::StatusCode code, double seconds);

 private:
  struct Names {
    std::string service;
    std::string method;
  };
  Names Split(const std::string& method) const;

  const absl::flat_hash_set<std::string> known_;
  prometheus::Family<prometheus::Counter>& started_;
  prometheus::Family<prometheus::Counter>& handled_;
  prometheus::Family<prometheus::Histogram>& seconds_;
};

// The methods a server built by WalfeedServer registers: ChangeStream's,
// grpc.health.v1.Health's and server reflection's.
std::vector<std::string> ServedMethods();

}  // namespace walfeed::server::metrics

#endif  // WALFEED_SERVER_METRICS_RPC_METRICS_H_
