#include "server/metrics/rpc_metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server::metrics {
namespace {

// gRPC's canonical code names, as grpc-prometheus and grpcurl print them.
const char* CodeName(grpc::StatusCode code) {
  static constexpr const char* kNames[] = {
      "OK",           "Canceled",          "Unknown",           "InvalidArgument",
      "DeadlineExceeded", "NotFound",      "AlreadyExists",     "PermissionDenied",
      "ResourceExhausted", "FailedPrecondition", "Aborted",     "OutOfRange",
      "Unimplemented", "Internal",         "Unavailable",       "DataLoss",
      "Unauthenticated"};
  const int index = static_cast<int>(code);
  return index >= 0 && index < static_cast<int>(std::size(kNames)) ? kNames[index] : "Unknown";
}

class CallInterceptor : public grpc::experimental::Interceptor {
 public:
  CallInterceptor(RpcMetrics* metrics, grpc::experimental::ServerRpcInfo* info)
      : metrics_(metrics),
        method_(info->method()),
        unary_(info->type() == grpc::experimental::ServerRpcInfo::Type::UNARY),
        start_(absl::Now()) {
    metrics_->Started(method_);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->Handled(method_, unary_, methods->GetSendStatus().error_code(),
                        absl::ToDoubleSeconds(absl::Now() - start_));
    }
    methods->Proceed();
  }

 private:
  RpcMetrics* const metrics_;
  const std::string method_;
  const bool unary_;
  const absl::Time start_;
};

class Factory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new CallInterceptor(metrics_, info);  // gRPC deletes it when the call ends.
  }

 private:
  RpcMetrics* const metrics_;
};

}  // namespace

RpcMetrics::RpcMetrics(prometheus::Registry& registry, std::vector<std::string> known)
    : known_(known.begin(), known.end()),
      started_(prometheus::BuildCounter()
                   .Name("walfeed_grpc_server_started_total")
                   .Help("gRPC calls started, by service and method.")
                   .Register(registry)),
      handled_(prometheus::BuildCounter()
                   .Name("walfeed_grpc_server_handled_total")
                   .Help("gRPC calls completed, by service, method and status code.")
                   .Register(registry)),
      seconds_(prometheus::BuildHistogram()
                   .Name("walfeed_grpc_server_handling_seconds")
                   .Help("Time to answer unary gRPC calls (Ack includes its durable write).")
                   .Register(registry)) {}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcMetrics::InterceptorFactory() {
  return std::make_unique<Factory>(this);
}

RpcMetrics::Names RpcMetrics::Split(const std::string& method) const {
  if (!known_.contains(method)) return {"unknown", "unknown"};
  absl::string_view name = method;
  name.remove_prefix(1);  // "/".
  const size_t slash = name.find('/');
  return {std::string(name.substr(0, slash)), std::string(name.substr(slash + 1))};
}

void RpcMetrics::Started(const std::string& method) {
  const Names names = Split(method);
  started_.Add({{"grpc_service", names.service}, {"grpc_method", names.method}}).Increment();
}

void RpcMetrics::Handled(const std::string& method, bool unary, grpc::StatusCode code,
                         double seconds) {
  const Names names = Split(method);
  handled_
      .Add({{"grpc_service", names.service},
            {"grpc_method", names.method},
            {"grpc_code", CodeName(code)}})
      .Increment();
  if (!unary) return;
  // From a fraction of a millisecond (status, an ack of a grouped write) to a
  // durable write waiting on a slow database.
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  seconds_.Add({{"grpc_service", names.service}, {"grpc_method", names.method}}, kBuckets)
      .Observe(seconds);
}

std::vector<std::string> ServedMethods() {
  std::vector<std::string> methods;
  const google::protobuf::ServiceDescriptor* service =
      walfeed::v1::GetStatusRequest::descriptor()->file()->FindServiceByName("ChangeStream");
  for (int i = 0; i < service->method_count(); ++i) {
    methods.push_back(absl::StrCat("/", service->full_name(), "/", service->method(i)->name()));
  }
  for (const char* other : {"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
                            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"}) {
    methods.push_back(other);
  }
  return methods;
}

}  // namespace walfeed::server::metrics
