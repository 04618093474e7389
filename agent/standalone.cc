#include "agent/standalone.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"
#include "common/state/states.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/time_util.h"

namespace fleet::agent {
namespace {

using google::protobuf::util::TimeUtil;

class ParseErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first.empty()) first = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  std::string first;
};

}  // namespace

absl::StatusOr<fleet::v1::StandaloneConfig> ReadStandaloneConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("standalone spec ", path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  fleet::v1::StandaloneConfig config;
  google::protobuf::TextFormat::Parser parser;
  ParseErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text.str(), &config)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", errors.first));
  }
  if (config.servers().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no servers"));
  }
  return config;
}

StandaloneRunner::StandaloneRunner(Agent* agent, fleet::v1::StandaloneConfig config, Clock* clock,
                                   std::ostream* out)
    : agent_(agent), config_(std::move(config)), clock_(clock), out_(out) {
  for (const fleet::v1::ServerSpec& spec : config_.servers()) {
    servers_[spec.server().gpu()].spec = spec;
  }
  incarnation_ = agent_->incarnation();
  cursor_ = agent_->last_sequence();
  agent_->Subscribe(this);
}

StandaloneRunner::~StandaloneRunner() { agent_->Unsubscribe(this); }

void StandaloneRunner::OnEventsAvailable() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

void StandaloneRunner::RequestStop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
}

void StandaloneRunner::Launch(Server& server) {
  ++server.attempts;
  server.attempt_id = absl::StrCat("standalone-gpu", server.spec.server().gpu(), "-",
                                   absl::ToUnixMillis(clock_->Now()), "-", server.attempts);
  server.relaunch_at = absl::InfiniteFuture();
  server.stopping_for_relaunch = false;
  fleet::v1::LaunchRequest request;
  request.set_attempt_id(server.attempt_id);
  request.set_attempt_number(server.attempts);
  *request.mutable_spec() = server.spec;
  absl::StatusOr<fleet::v1::LaunchResponse> r = agent_->Launch(request);
  if (!r.ok()) {
    *out_ << "gpu" << server.spec.server().gpu() << " launch failed: " << r.status().message()
          << "\n";
    server.gave_up = true;
  }
}

std::string StandaloneRunner::Describe(const fleet::v1::AgentEvent& e) const {
  std::string line = absl::StrCat(
      absl::FormatTime("%H:%M:%S", absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(e.at())),
                       absl::LocalTimeZone()),
      " gpu", e.server().gpu(), " #", e.sequence(), " ");
  switch (e.kind_case()) {
    case fleet::v1::AgentEvent::kPhase:
      absl::StrAppend(&line, AsAbsl(StateName(ServerStateOf(e.phase()))),
                      e.phase().detail().empty() ? "" : absl::StrCat(" ", e.phase().detail()));
      break;
    case fleet::v1::AgentEvent::kProgress:
      absl::StrAppend(&line, "build step ", e.progress().step(), "/", e.progress().total());
      break;
    case fleet::v1::AgentEvent::kDiagnosis:
      absl::StrAppend(&line, e.diagnosis().final() ? "diagnosis " : "provisional diagnosis ",
                      e.diagnosis().diagnosis().diagnosis_class(), " (line ",
                      e.diagnosis().diagnosis().root_cause_line(),
                      "): ", e.diagnosis().diagnosis().summary());
      break;
    case fleet::v1::AgentEvent::kExited:
      absl::StrAppend(&line, "exited ",
                      e.exited().status_unknown() ? "(status unknown)"
                      : e.exited().exited() ? absl::StrCat("with status ", e.exited().exit_code())
                                            : absl::StrCat("on signal ", e.exited().signal()));
      break;
    case fleet::v1::AgentEvent::kReady:
      absl::StrAppend(&line, "ready (HTTP ", e.ready().http_status(), ") after ",
                      TimeUtil::ToString(e.ready().time_to_ready()));
      break;
    case fleet::v1::AgentEvent::kStalled:
      absl::StrAppend(&line, e.stalled().diagnosis_class(), ": ",
                      e.stalled().diagnosis().summary());
      break;
    case fleet::v1::AgentEvent::kResync:
      absl::StrAppend(&line, "resync");
      break;
    case fleet::v1::AgentEvent::KIND_NOT_SET:
      break;
  }
  return line;
}

void StandaloneRunner::Handle(const fleet::v1::AgentEvent& e, absl::Time now) {
  auto it = servers_.find(e.server().gpu());
  if (it == servers_.end() || e.attempt_id() != it->second.attempt_id) return;
  Server& s = it->second;
  const int32_t max_attempts = config_.max_attempts() > 0 ? config_.max_attempts() : 3;
  const int64_t backoff_ns = TimeUtil::DurationToNanoseconds(config_.backoff());
  const absl::Duration backoff = backoff_ns > 0 ? absl::Nanoseconds(backoff_ns) : absl::Seconds(5);
  if (e.has_phase()) {
    s.state = ServerStateOf(e.phase());
    const bool failed = s.state == fleet::v1::SERVER_STATE_FAILED ||
                        (s.state == fleet::v1::SERVER_STATE_STOPPED && s.stopping_for_relaunch);
    if (failed) {
      if (s.attempts >= max_attempts) {
        s.gave_up = true;
        *out_ << "gpu" << e.server().gpu() << " GAVE_UP after " << s.attempts << " attempts\n";
      } else {
        s.relaunch_at = now + backoff;
      }
    }
  }
  if (e.has_stalled() && !s.stopping_for_relaunch) {
    // A stall ends the attempt: stop it, then relaunch like a failure.
    s.stopping_for_relaunch = true;
    fleet::v1::StopRequest stop;
    *stop.mutable_server() = e.server();
    agent_->Stop(stop).IgnoreError();
  }
}

int StandaloneRunner::Run(bool until_ready) {
  for (auto& [gpu, s] : servers_) Launch(s);
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return 0;
      wake_ = false;
    }
    const absl::Time now = clock_->Now();
    for (const fleet::v1::AgentEvent& e : agent_->EventsAfter(incarnation_, cursor_, 256)) {
      incarnation_ = e.incarnation();
      cursor_ = e.sequence();
      *out_ << Describe(e) << "\n";
      Handle(e, now);
    }
    out_->flush();
    absl::Time next = absl::InfiniteFuture();
    bool all_ready = true, any_gave_up = false;
    for (auto& [gpu, s] : servers_) {
      if (s.relaunch_at <= now) Launch(s);
      next = std::min(next, s.relaunch_at);
      all_ready &= s.state == fleet::v1::SERVER_STATE_READY;
      any_gave_up |= s.gave_up;
    }
    if (until_ready && (all_ready || any_gave_up)) return all_ready ? 0 : 1;
    absl::MutexLock lock(&mu_);
    const absl::Duration wait = std::min(absl::Seconds(1), next - clock_->Now());
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](StandaloneRunner* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
                               return r->wake_ || r->stop_;
                             },
                             this),
                         std::max(wait, absl::ZeroDuration()));
  }
}

}  // namespace fleet::agent
