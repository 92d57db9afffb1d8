// Session: one Subscribe call as the stream layer knows it: who it is for, what
// it asked for, and how to tell its reactor there is something to send. Its
// delivery state (cursor, unacked window, end) lives in the ConsumerRegistry,
// under the registry's mutex.
//
// Locks: the reactor calls into the registry while holding its own lock, so the
// registry never wakes a session while holding its mutex: it returns the
// sessions to wake, and the caller wakes them after unlocking.
#ifndef WALFEED_SERVER_SESSION_H_
#define WALFEED_SERVER_SESSION_H_

#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/event_forms.h"
#include "server/filter.h"
#include "server/session_limits.h"

namespace walfeed::server {

// What a Subscribe asked for, with server defaults applied.
struct SessionOptions {
  EventFilter filter;
  SessionLimits limits;
  // No durable state: starts at the newest event held, holds nothing, is not
  // acked (no unacked window), ends OUT_OF_RANGE when it falls behind.
  bool ephemeral = false;
  // A new durable consumer starts after the newest event held instead of the
  // oldest.
  bool start_latest = false;
  // EVENT_FORM_COMPACT (row events without column metadata, shapes once) and
  // the value form.
  EventForm form;
};

// The Subscribe reactor, as the stream layer sees it. May be called from any
// thread; must not block.
class SessionListener {
 public:
  virtual ~SessionListener() = default;
  // There may be something to send (events, a progress frame, or the end).
  virtual void Wake() = 0;
};

class Session {
 public:
  Session(std::string id, std::string consumer, SessionOptions options)
      : id_(std::move(id)), consumer_(std::move(consumer)), options_(std::move(options)) {}
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& id() const { return id_; }
  const std::string& consumer() const { return consumer_; }
  const SessionOptions& options() const { return options_; }

  // Wakes the listener, if one is attached.
  void Wake() ABSL_LOCKS_EXCLUDED(listener_mu_) {
    absl::MutexLock lock(&listener_mu_);
    if (listener_ != nullptr) listener_->Wake();
  }
  void Attach(SessionListener* listener) ABSL_LOCKS_EXCLUDED(listener_mu_) {
    absl::MutexLock lock(&listener_mu_);
    listener_ = listener;
  }
  void Detach() ABSL_LOCKS_EXCLUDED(listener_mu_) { Attach(nullptr); }

 private:
  const std::string id_;
  const std::string consumer_;
  const SessionOptions options_;
  absl::Mutex listener_mu_;
  SessionListener* listener_ ABSL_GUARDED_BY(listener_mu_) = nullptr;
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_SESSION_H_
