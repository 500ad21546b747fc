// NotifyService: subscriptions and the notification log (notify.proto), over the Notifier.
// Every handler starts with the token check (user or admin).

#include "common/status.h"
#include "common/strings.h"
#include "server/internal/convert.h"
#include "server/internal/services.h"

namespace cart::server::internal {

absl::StatusOr<std::string> NotifyServiceImpl::Caller(grpc::ServerContext* context,
                                                      const char* method) const {
  CART_ASSIGN_OR_RETURN(Principal who,
                        ctx_.tokens->Check(AuthorizationOf(*context), Api::kScheduler,
                                           StrCat("NotifyService.", method)));
  return CallerName(who);  // a worker's token may not call this API
}

#define CART_NOTIFY_CALLER(var, method)                                                \
  std::string var;                                                                     \
  {                                                                                    \
    absl::StatusOr<std::string> caller_ = Caller(context, method);                     \
    if (!caller_.ok()) return ToGrpc(caller_.status());                                \
    var = *std::move(caller_);                                                         \
  }                                                                                    \
  if (ctx_.notifier == nullptr) {                                                      \
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "this cartd runs no notifier"); \
  }

grpc::Status NotifyServiceImpl::Subscribe(grpc::ServerContext* context,
                                          const v1::SubscribeRequest* request,
                                          v1::SubscriptionView* response) {
  CART_NOTIFY_CALLER(who, "Subscribe");
  notify::SubscribeRequest ask;
  ask.run_id = request->run_id();
  ask.sweep = request->sweep();
  ask.events = request->events();
  std::optional<store::NotifyChannel> channel = store::ParseNotifyChannel(request->channel());
  if (!channel) {
    return ToGrpc(absl::InvalidArgumentError(
        StrCat("channel '", request->channel(), "' is not webhook, slack or email")));
  }
  ask.channel = *channel;
  ask.target = request->target();
  if (request->lost_after_s() < 0) {
    return ToGrpc(absl::InvalidArgumentError(
        StrCat("lost_after_s must be >= 1 s, got ", request->lost_after_s())));
  }
  if (request->lost_after_s() > 0) ask.lost_after = absl::Seconds(request->lost_after_s());
  if (request->stuck_factor() != 0) ask.stuck_factor = request->stuck_factor();
  if (request->slip_share() != 0) ask.slip_share = request->slip_share();
  absl::StatusOr<store::Subscription> sub = ctx_.notifier->Subscribe(who, ask);
  if (!sub.ok()) return ToGrpc(sub.status());
  *response = ToProto(*sub);
  return grpc::Status::OK;
}

grpc::Status NotifyServiceImpl::ListSubscriptions(grpc::ServerContext* context,
                                                  const v1::ListSubscriptionsRequest* request,
                                                  v1::ListSubscriptionsResponse* response) {
  CART_NOTIFY_CALLER(who, "ListSubscriptions");
  absl::StatusOr<std::vector<store::Subscription>> subs = ctx_.notifier->List(who, request->all());
  if (!subs.ok()) return ToGrpc(subs.status());
  for (const store::Subscription& s : *subs) *response->add_subscriptions() = ToProto(s);
  return grpc::Status::OK;
}

grpc::Status NotifyServiceImpl::Unsubscribe(grpc::ServerContext* context,
                                            const v1::UnsubscribeRequest* request,
                                            v1::UnsubscribeResponse* /*response*/) {
  CART_NOTIFY_CALLER(who, "Unsubscribe");
  return ToGrpc(ctx_.notifier->Unsubscribe(who, request->id()));
}

grpc::Status NotifyServiceImpl::SendTest(grpc::ServerContext* context,
                                         const v1::SendTestRequest* request,
                                         v1::SendTestResponse* response) {
  CART_NOTIFY_CALLER(who, "SendTest");
  absl::StatusOr<int64_t> id = ctx_.notifier->SendTest(who, request->id());
  if (!id.ok()) return ToGrpc(id.status());
  response->set_notification_id(*id);
  return grpc::Status::OK;
}

grpc::Status NotifyServiceImpl::NotificationLog(grpc::ServerContext* context,
                                                const v1::NotificationLogRequest* request,
                                                v1::NotificationLogResponse* response) {
  CART_NOTIFY_CALLER(who, "NotificationLog");
  const int64_t limit = request->limit() == 0 ? 50 : request->limit();
  absl::StatusOr<std::vector<store::NotificationRecord>> log =
      ctx_.notifier->Log(who, request->subscription_id(), request->all(), limit);
  if (!log.ok()) return ToGrpc(log.status());
  for (const store::NotificationRecord& n : *log) *response->add_notifications() = ToProto(n);
  return grpc::Status::OK;
}

}  // namespace cart::server::internal
