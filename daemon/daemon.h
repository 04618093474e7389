// Daemon: the control plane. It holds the desired state (the fleet config, stored in SQLite so it
// survives kill -9), follows every container's agent (its event stream, resumed from the stored
// cursor after any disconnect: no event lost, none applied twice), keeps one record per server
// and per attempt, and reconciles: it allocates an attempt and writes its row *before* it calls
// the agent's Launch with that id (idempotent there), restarts with backoff what may succeed on
// retry, gives up with the reason when nothing it can do would help, and stops what is no longer
// wanted. It never stops servers when it goes away itself: they belong to the agents.
//
// Nothing leaves before its record: the agent calls a turn decides (Launch, Stop) are sent only
// once the commit holding their attempt rows succeeded; when it fails (disk full, database busy)
// they wait, with the rows, for a turn whose commit does (the same attempt, never a second one).
// Events are stored with the agent's cursor in one commit; a batch whose write fails is kept in
// memory and written again, and while it waits the agents' streams are held (Admit).
//
// Step() is the whole turn (ingest what the agents said, reconnect what is due, act on every
// server: the Reconciler (reconciler.h) decides each server's move from the state in memory, the
// Daemon applies the decisions: the gate, attempt rows, calls); Start() runs it on a thread of
// its own; tests call it directly with a FakeClock and fake agents. The public methods serve
// fleet.proto and are thread-safe. Each user of an agent client holds it (a shared_ptr) for the
// length of its call; a client a redeploy replaced is destroyed, on a daemon thread, once no call
// uses it.
//
// Lock order (docs/architecture.md, "Threads and locks"): notify_mu_ -> (a Watch stream's own
// lock) -> mu_ -> store_mu_ -> queue_mu_. queue_mu_, CallPacer's and RemediationRunner's locks
// are leaves; logs_mu_ is taken with no other daemon lock; an agent client's lock may be taken
// under mu_ (Follow), and a client is destroyed with no daemon lock held. The Reconciler has no
// lock: Reconcile calls its Step under mu_ and store_mu_. No daemon lock is held across an agent
// call (Status, Launch, Stop and Follow are asynchronous: they only start; Logs, and the runner's
// Probe and Apply, are made without one), an SSH step or a disk write other than the store's own:
// an agent that does not answer delays its own container only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/log/log_fields.h"
#include "daemon/agent_client.h"
#include "daemon/call_pacer.h"
#include "daemon/events/fleet_journal.h"
#include "daemon/fenced_agent_client.h"
#include "daemon/planner/planner.h"
#include "daemon/reconciler.h"
#include "daemon/remediation_runner.h"
#include "daemon/server_state.h"
#include "daemon/store/fleet_store.h"
#include "proto/config.pb.h"
#include "proto/fleet.pb.h"

namespace fleet::daemon {

struct DaemonOptions {
  absl::Duration tick = absl::Milliseconds(500);  // the longest the loop waits between turns
  absl::Duration reconnect_initial = absl::Milliseconds(200);
  absl::Duration reconnect_max = absl::Seconds(30);
  // How often a followed link asks its agent how far its event log runs: a stream that has not
  // brought, by the next check, the events the agent had at this one is stalled (it ended
  // unseen, or stopped moving), and is followed again. Zero: never checked.
  absl::Duration stream_check = absl::Seconds(30);
  absl::Duration event_retention = absl::Hours(24 * 30);
  int64_t max_events = 2000000;
  // A turn applies every queued event, this many per hold of the state lock (status queries wait
  // for at most one such chunk), and writes them all in one commit.
  size_t events_per_lock = 1024;
  // Events queued (received, not yet applied) beyond which the agents' streams wait: bounds the
  // daemon's memory when agents send faster than it records.
  size_t queue_limit = 32768;
  // Launch and Stop calls unanswered at a time (the rest wait their turn).
  int calls_in_flight = 64;
  // Remediation jobs (probe, plan, apply: agent calls that may take minutes for a pip install)
  // run on this many threads, one job per container at a time. 0 runs them inside Step, after
  // its calls are sent (tests: a turn does the whole job; its result is taken by the next turn).
  int fix_threads = 2;
  PlannerOptions planner;
  // After this long READY a server's failure count (the backoff's exponent) starts again.
  absl::Duration backoff_reset = absl::Minutes(10);
  // With a leader lease (issue 16; fleetd --store-file): the fence every agent request that
  // changes something carries (the factory's clients are wrapped: fenced_agent_client.h), and
  // whether this fleetd may act now (its lease held, before its local deadline): while it says no,
  // no turn runs. Both empty for a fleetd alone.
  std::shared_ptr<const LeaderFence> fence;
  std::function<bool()> may_act;
};

// What `fleetd --config FILE` does with FILE when it starts. The stored desired state wins (the
// habit of kubectl and Nomad): FILE seeds an empty record, and is applied again only when its
// text changed since it was last applied from that path; a `fleetctl deploy -f` made after it
// stays.
enum class StartupConfigAction {
  kSeeded,   // the record held no config: FILE is the first
  kApplied,  // FILE's text differs from what was last applied from it (or it never was)
  kIgnored,  // FILE is what was last applied from it: the record's config stays
};
// The decision alone: `last_digest_from_file` is the digest stored with the newest config
// applied from FILE's path (nullopt: none was).
StartupConfigAction DecideStartupConfig(bool record_has_config,
                                        const std::optional<std::string>& last_digest_from_file,
                                        const std::string& file_digest);
struct StartupConfigOutcome {
  StartupConfigAction action = StartupConfigAction::kIgnored;
  int64_t version = 0;  // the config version the record holds after it
  std::string message;  // one line for fleetd's log: which of the three, and why
};

// Where the webhook deliveries go once recorded (the Notifier, daemon/notify/): told the config's
// notify entries at every deploy, and each batch of deliveries after the commit that made them
// (and, at SetDeliverySink, those a fleetd before left pending). Must not block.
class DeliverySink {
 public:
  virtual ~DeliverySink() = default;
  virtual void Configure(std::vector<fleet::v1::Notify> notify) = 0;
  virtual void Deliver(std::vector<DeliveryRecord> deliveries) = 0;
};

// What /metrics shows of the fleet now (a copy, made under the state lock).
struct FleetSnapshot {
  struct ServerInfo {
    std::string name, host, ctid;
    int32_t gpu = 0;            // the lead
    std::vector<int32_t> gpus;  // every GPU it runs on, the lead first
    fleet::v1::ServerState state = fleet::v1::SERVER_STATE_UNSPECIFIED;
    absl::Time state_since;
    std::string diagnosis_class;  // the last one ("none" when none)
    std::string template_name;
    bool ready = false;
    int32_t port = 0;
    std::string engine;
  };
  struct LinkInfo {
    std::string host, ctid;
    bool ssh = false;
    bool connected = false;
    std::string address;  // where the container's servers are reached (direct channels)
  };
  struct Approval {
    std::string host, ctid, diagnosis_class;
  };
  std::vector<ServerInfo> servers;
  std::vector<LinkInfo> links;
  std::vector<Approval> approvals;
};

// Told (without the daemon's lock) that server rows changed.
class StatusSubscriber {
 public:
  virtual ~StatusSubscriber() = default;
  virtual void OnStatusChanged() = 0;
};

class Daemon : public EventSink, public PlanRecorder {
 public:
  static absl::StatusOr<std::unique_ptr<Daemon>> Create(std::unique_ptr<FleetStore> store,
                                                        AgentClientFactory factory, Clock* clock,
                                                        DaemonOptions options = {});
  ~Daemon() override;

  void Start();
  // One turn of the reconciler.
  void Step();

  // A standby (issue 16) is a Daemon that is not started: it answers the read verbs from its
  // copy of the record, which Reload reads again (servers, attempts, remediations, links and
  // cursors: what a start reads), when it is older than `max_age`. At a takeover the new leader
  // reloads once more, then fences the record and starts: it carries on from what the old
  // leader committed. After Start() it does nothing (the state in memory is the live one).
  absl::Status Reload(absl::Duration max_age = absl::ZeroDuration())
      ABSL_LOCKS_EXCLUDED(mu_, store_mu_);
  // From now on every write of the record first checks that `term` leads `fleet_id`
  // (FleetStore::SetFence): a leader that lost its lease writes nothing more.
  void FenceRecord(const std::string& fleet_id, int64_t term) ABSL_LOCKS_EXCLUDED(store_mu_);
  // The record's fleet id (FleetStore::FleetId).
  absl::StatusOr<std::string> FleetId() ABSL_LOCKS_EXCLUDED(store_mu_);

  // fleet.proto, for the service.
  absl::StatusOr<fleet::v1::DeployResponse> Deploy(const fleet::v1::DeployRequest& request);
  // `fleetd --config FILE` at a start, before serving: `yaml` is FILE's text, `source` its path.
  // Seeds, applies (through Deploy) or ignores it, as DecideStartupConfig says.
  absl::StatusOr<StartupConfigOutcome> ApplyStartupConfig(const std::string& source,
                                                          const std::string& yaml)
      ABSL_LOCKS_EXCLUDED(mu_, store_mu_);
  fleet::v1::FleetStatusResponse Status(const fleet::v1::FleetStatusRequest& request);
  // The same, into `response` (the service's, on its arena).
  void Status(const fleet::v1::FleetStatusRequest& request,
              fleet::v1::FleetStatusResponse* response);
  // Rows whose version is above `*since`; updates `*since`.
  std::vector<fleet::v1::ServerRow> ChangedRows(const std::set<std::string>& servers,
                                                uint64_t* since);
  absl::StatusOr<fleet::v1::ListAttemptsResponse> ListAttempts(
      const fleet::v1::ListAttemptsRequest& request);
  absl::StatusOr<fleet::v1::ExplainResponse> Explain(const fleet::v1::ExplainRequest& request);
  absl::StatusOr<fleet::v1::ServersResponse> Restart(const fleet::v1::ServersRequest& request);
  absl::StatusOr<fleet::v1::ServersResponse> Stop(const fleet::v1::ServersRequest& request);
  // The planner's view of a server: the plan waiting for approval (policy `ask`), else a plan made
  // now from its last failure (or a preflight when it has none), recorded as `proposed` with
  // trigger `manual`; or why nothing would be changed. Blocks on the agent's probe.
  absl::StatusOr<fleet::v1::PlanResponse> Plan(const fleet::v1::PlanRequest& request);
  // Runs a proposed plan now (blocks until the agent applied it), then restarts the servers of
  // its container that wait on it.
  absl::StatusOr<fleet::v1::ApplyPlanResponse> ApplyPlan(
      const fleet::v1::ApplyPlanRequest& request);
  absl::StatusOr<fleet::v1::ListRemediationsResponse> ListRemediations(
      const fleet::v1::ListRemediationsRequest& request);
  // The config last deployed, as stored (defaults applied); nullopt before the first deploy.
  // Read from the record under its own lock, never the state lock.
  absl::StatusOr<std::optional<fleet::v1::FleetConfig>> CurrentConfig()
      ABSL_LOCKS_EXCLUDED(store_mu_);
  // Streams a server's log from its agent until `on_chunk` returns false or `cancel` (may be
  // null) is cancelled, or the daemon is destroyed (which cancels it and waits for it). Blocks.
  absl::Status Logs(const fleet::v1::ServerLogsRequest& request,
                    const std::function<bool(const fleet::v1::LogChunk&)>& on_chunk,
                    CallCancel* cancel = nullptr) ABSL_LOCKS_EXCLUDED(mu_, logs_mu_);

  // The fleet's events: recorded ones with an index above `since` (at most `limit`), from memory
  // or the record; `*oldest` is the oldest index the record keeps (0 when none).
  absl::StatusOr<std::vector<fleet::v1::FleetEvent>> FleetEvents(int64_t since, size_t limit,
                                                                 int64_t* oldest)
      ABSL_LOCKS_EXCLUDED(store_mu_);
  FleetJournal& journal() { return journal_; }
  FleetSnapshot Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);
  // Agent events taken from the streams since the start (fleet_events_ingested_total).
  uint64_t EventsIngested() const ABSL_LOCKS_EXCLUDED(queue_mu_);
  // The webhooks' deliveries: given their config and the deliveries left pending now, then each
  // new batch. nullptr: none from now on (deliveries made meanwhile stay pending in the record,
  // for the next start); returns once no call reaches the old sink.
  void SetDeliverySink(DeliverySink* sink) ABSL_LOCKS_EXCLUDED(mu_, store_mu_, sink_mu_);
  // A delivery's try recorded (the Notifier's threads).
  absl::Status RecordDelivery(const DeliveryRecord& delivery) ABSL_LOCKS_EXCLUDED(store_mu_);

  void Subscribe(StatusSubscriber* s);
  void Unsubscribe(StatusSubscriber* s);

  // EventSink: called from the streams' threads; queued for the loop.
  void OnEvent(const std::string& container, fleet::v1::AgentEvent event) override;
  void OnEvents(const std::string& container, std::vector<fleet::v1::AgentEvent> events) override;
  void OnStreamEnded(const std::string& container, absl::Status status) override;
  bool Admit(std::function<void()> resume) override;

 private:
  using Server = TrackedServer;  // server_state.h
  // A container's remediation state: its toolchain is shared by its servers, so one job at a
  // time for it, and one canary after a change that affects the JIT build.
  struct Fixes {
    bool preflight_done = false;
    int preflight_rounds = 0;  // preflights applied that uncovered more to fix
    bool busy = false;         // a job runs for it
    std::string busy_class;
    absl::Time retry_at = absl::InfinitePast();  // after a job could not reach the agent
    std::vector<fleet::v1::Plan> history;        // oldest first
    // Preflight probes that failed in a row, and what the servers waiting on it are told.
    int probe_failures = 0;
    std::string preflight_reason;
    // Plans a fleetd that stopped left "applying" (ids, oldest first): each is resolved by a
    // probe (kResolve) before anything else of the container is planned or launched.
    std::deque<std::string> unresolved;
    bool jit_warm = false;  // a server passed the JIT phase since the last JIT-affecting change
    std::string canary;     // the server that starts alone while the cache is cold
  };
  struct Link {
    std::string container;  // host/ctid
    fleet::v1::Host host;
    fleet::v1::Container config;
    std::shared_ptr<AgentClient> client;
    enum State { kIdle, kConnecting, kFollowing } state = kIdle;
    // The agent said it cannot replay from our cursor (Resync): its stream is ended, and the
    // snapshot of the next connection is taken whatever its incarnation, the gap recorded.
    bool resync = false;
    absl::Time retry_at = absl::InfinitePast();
    int failures = 0;
    AgentCursor cursor;
    std::string last_error;  // why it cannot reach its agent now ("" when it can)
    // The stream's check (DaemonOptions::stream_check): when it is due, whether one is asked,
    // and where the agent's log was at the last one when the stream was behind it (the
    // position the stream must have passed by the next).
    absl::Time check_at = absl::InfiniteFuture();
    bool checking = false;
    std::optional<AgentCursor> agent_was_at;
    bool up = false;  // its agent answered since the link was last lost (agent_* events)
  };
  struct Queued {
    std::string container;
    bool ended = false;
    absl::Status status;
    fleet::v1::AgentEvent event;
  };
  Daemon(std::unique_ptr<FleetStore> store, AgentClientFactory factory, Clock* clock,
         DaemonOptions options);
  absl::Status Recover() ABSL_LOCKS_EXCLUDED(mu_, store_mu_);
  absl::Status RecoverLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, store_mu_);
  absl::Status ApplyConfig(const fleet::v1::FleetConfig& config, const std::set<std::string>& only,
                           std::vector<fleet::v1::Change>* changes, bool dry_run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, store_mu_);
  // Applies the queued events (under mu_, in chunks); WriteUnsaved records them, and what they
  // and the agents' snapshots changed, holding store_mu_ only: status queries never wait for the
  // disk.
  void Ingest(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_, store_mu_);
  void WriteUnsaved(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_, store_mu_);
  void ApplyEvent(const std::string& container, const fleet::v1::AgentEvent& e, absl::Time now,
                  std::set<std::string>* touched) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplySnapshot(Link& link, const fleet::v1::StatusResponse& snapshot, absl::Time now,
                     std::set<std::string>* touched) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks every due link's agent for its Status (all at once); Connected follows each answer.
  // Asks the followed links whose check is due too; StreamChecked takes those answers.
  void Connect(absl::Time now);
  void StreamChecked(const std::string& container, const AgentClient* client,
                     const absl::StatusOr<fleet::v1::StatusResponse>& snapshot);
  // A link that could not reach its agent (its Status failed, or its stream ended): retried
  // with backoff. Why is logged when it changes and shown as its servers' reason (status,
  // watch) until the agent answers again (LinkUp): an unreachable host, a failed agent
  // bootstrap. A cancelled stream (fleetd ended it) is retried without a word.
  void LinkFailed(Link& l, const absl::Status& why, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LinkUp(Link& l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TouchContainer(const std::string& container) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Connected(const std::string& container, const AgentClient* client,
                 const absl::StatusOr<fleet::v1::StatusResponse>& snapshot)
      ABSL_LOCKS_EXCLUDED(mu_, store_mu_);
  // Each server's next move: the reconciler's decisions (reconciler_.Step over servers_) applied
  // in order. The calls are returned (sent once the turn's commit holds their rows), the jobs
  // queued in `jobs`, the names of the servers whose rows changed put in `changed` (written by
  // the caller).
  std::vector<AgentCall> Reconcile(absl::Time now, std::set<std::string>* changed,
                                   std::vector<FixJob>* jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, store_mu_);
  // One decision applied: the gate asked where it says so, the attempt row made (in the turn's
  // batch), the call queued in `calls`, the server's flags and state changed.
  void Apply(const Decision& d, absl::Time now, std::set<std::string>* changed,
             std::vector<FixJob>* jobs, std::vector<AgentCall>* calls)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, store_mu_);
  void Launch(const Decision& d, Server& s, absl::Time now, std::set<std::string>* changed,
              std::vector<FixJob>* jobs, std::vector<AgentCall>* calls)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, store_mu_);
  // Hands one of a turn's calls to its agent's client (CallPacer's `send`): false when it is
  // dropped (its link is gone, or a newer attempt superseded it).
  bool SendCall(AgentCall& call, std::function<void()> finished) ABSL_LOCKS_EXCLUDED(mu_);
  void LaunchDone(const std::string& server, const std::string& attempt_id,
                  const absl::StatusOr<fleet::v1::LaunchResponse>& r) ABSL_LOCKS_EXCLUDED(mu_);
  void StopDone(const std::string& server, const absl::StatusOr<fleet::v1::StopResponse>& r)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Wake() ABSL_LOCKS_EXCLUDED(queue_mu_);
  void SetState(Server& s, v1::ServerState state, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The fleet events of a server's change (SetState calls it): its attempt's outcome, once.
  void JournalAttempt(Server& s, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string TemplateOf(const ServerRecord& r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the sink the config's webhooks (after a deploy).
  void ConfigureSink() ABSL_LOCKS_EXCLUDED(mu_, store_mu_, sink_mu_);
  // The turn's fleet events written in its batch (with the deliveries they make); returned for
  // Publish once committed, or put back when the write failed.
  std::vector<fleet::v1::FleetEvent> WriteJournal(absl::Time now,
                                                  std::vector<DeliveryRecord>* deliveries)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(store_mu_);
  void Touch(Server& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the servers' rows and attempts in one commit; on failure they are left in dirty_ for
  // the next turn.
  void Persist(const std::set<std::string>& servers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, store_mu_);
  // Persist in two halves: the rows copied under mu_, written with store_mu_ alone.
  struct RowWrite {
    ServerRecord record;
    AttemptRecord attempt;
  };
  std::vector<RowWrite> Collect(const std::set<std::string>& servers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The names of the servers whose rows could not be written go to `failed`.
  // What fleetd says while its record cannot be written (a full disk fails every write of every
  // turn): a failure at warn when its reason is new, the same again at debug, and once at info
  // when a commit works again. `consequence` follows the status (" (written again next turn)").
  void RecordFailed(const absl::Status& status, const log::LogFields& fields,
                    std::string_view consequence = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(store_mu_);
  void RecordWritten() ABSL_EXCLUSIVE_LOCKS_REQUIRED(store_mu_);
  void WriteRows(const std::vector<RowWrite>& rows, std::set<std::string>* failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(store_mu_);
  // Resumes the streams that wait (Admit) when the queue and the events waiting for the record
  // leave room.
  void ResumeStreams() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Destroys the retired clients no call uses any more (outside every lock: their destructors
  // wait for their calls' answers, which take mu_).
  void ReleaseRetired() ABSL_LOCKS_EXCLUDED(mu_);
  Server* FindServer(const fleet::v1::ServerRef& ref) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  fleet::v1::ServerRow Row(const Server& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillRow(const Server& s, fleet::v1::ServerRow* row) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<std::string>> Select(const fleet::v1::ServersRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Restart and Stop: `change` applied to each selected server, the rows written in one commit,
  // a turn woken.
  absl::StatusOr<fleet::v1::ServersResponse> ChangeSelected(
      const fleet::v1::ServersRequest& request, const std::function<void(Server&)>& change)
      ABSL_LOCKS_EXCLUDED(mu_, store_mu_);
  void NotifySubscribers() ABSL_LOCKS_EXCLUDED(mu_);
  void Loop();

  // Remediation (remediation.cc; FixFinished in daemon.cc).
  absl::Status LoadFixes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, store_mu_);
  // Whether `s` may launch now: the container's preflight is done, no remediation runs, no plan
  // waits for approval, and the canary rule lets it. Else it waits (reason set), and a
  // preflight job may be queued.
  bool Gate(Server& s, absl::Time now, std::vector<FixJob>* jobs, std::set<std::string>* changed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A failed server whose diagnosis a change may fix (the reconciler's kRemediate): a diagnosis
  // job is queued, or it waits on the container's running one (or for its agent), REMEDIATING.
  void Remediate(Server& s, absl::Time now, std::vector<FixJob>* jobs,
                 std::set<std::string>* changed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  FixJob MakeJob(FixJob::Kind kind, const Server& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // While the container has a plan left "applying" by a fleetd that stopped: queues the job that
  // resolves it (when the agent can be asked) and keeps `s` waiting (`why`). False when none.
  bool Resolve(Server& s, const std::string& why, absl::Time now, std::vector<FixJob>* jobs,
               std::set<std::string>* changed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A failed preflight probe: backoff, then launch without it or give up, as the policy says.
  void PreflightFailed(const FixJob& job, const std::string& error, absl::Time now,
                       std::set<std::string>* changed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Wait(Server& s, const std::string& why, const std::string& reason,
            std::set<std::string>* changed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Backoff (policy initial doubling to max, +-25% jitter), or GAVE_UP when the budget is spent.
  void Backoff(Server& s, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The spec with the fixes of the container's applied remediations.
  void WithFixes(const std::string& container, fleet::v1::ServerSpec* spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PlanRecorder, for the remediation runner.
  absl::Status Record(fleet::v1::Plan* plan, bool create) override ABSL_LOCKS_EXCLUDED(store_mu_);
  // A job's result (the runner's `done`), taken by the next turn.
  void FixFinished(FixDone done) ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Writes the plans whose update failed (Record kept them), oldest id first; stops at a failure.
  void RecordPending() ABSL_EXCLUSIVE_LOCKS_REQUIRED(store_mu_);
  void ApplyFixResults(absl::Time now, std::set<std::string>* changed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, store_mu_);

  // Constant after construction.
  const AgentClientFactory factory_;
  Clock* const clock_;
  const DaemonOptions options_;
  const Reconciler reconciler_;  // pure: called under mu_, takes no lock

  mutable absl::Mutex mu_;
  // The record has a lock of its own, always taken after mu_ (never the other way round). A turn
  // applies events under mu_ and writes them holding store_mu_ alone (taken before mu_ is let
  // go, so the record is written in the order of the states it records): Status and Watch,
  // which need only mu_, do not wait for SQLite.
  absl::Mutex store_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::unique_ptr<FleetStore> store_ ABSL_GUARDED_BY(store_mu_);
  std::map<std::string, Server> servers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Link>> links_ ABSL_GUARDED_BY(mu_);
  // Applied in memory, not yet in the record: written by the loop (WriteUnsaved), in order.
  struct Unsaved {
    std::map<std::string, std::vector<fleet::v1::AgentEvent>> events;  // by container
    std::map<std::string, std::set<std::string>> rows;  // container -> servers changed
    // Attempts no longer current, as they ended (lost: the agent no longer knew them; or
    // replaced by the next attempt): written until a commit holds them.
    std::vector<AttemptRecord> closed;
    struct Gap {
      std::string container;
      AgentCursor from, to;
    };
    std::vector<Gap> gaps;
  };
  Unsaved unsaved_ ABSL_GUARDED_BY(mu_);
  // Servers whose row and attempt changed outside a turn (a Launch answered): written, together,
  // at the end of the next turn.
  std::set<std::string> dirty_ ABSL_GUARDED_BY(mu_);
  // Clients of links a deploy replaced, destroyed (by ReleaseRetired, without mu_) once no call
  // holds them.
  std::vector<std::shared_ptr<AgentClient>> retired_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  bool changed_ ABSL_GUARDED_BY(mu_) = false;
  std::set<StatusSubscriber*> subscribers_ ABSL_GUARDED_BY(mu_);
  absl::Time loaded_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // the last Recover/Reload
  bool started_ ABSL_GUARDED_BY(mu_) = false;                         // Start() ran
  absl::Time last_prune_ ABSL_GUARDED_BY(store_mu_) = absl::InfinitePast();
  std::string record_error_ ABSL_GUARDED_BY(store_mu_);     // the last write failure's reason
  int64_t record_failures_ ABSL_GUARDED_BY(store_mu_) = 0;  // since the last write that worked
  // Plans whose last update the record refused (busy, full), by id: written again each turn.
  std::map<std::string, fleet::v1::Plan> unrecorded_plans_ ABSL_GUARDED_BY(store_mu_);

  // The fleet's events between the state changes that make them and their commit (a leaf lock).
  FleetJournal journal_;
  // The config's webhooks (deliveries are made from them in the commit) and where they go.
  std::vector<fleet::v1::Notify> notify_ ABSL_GUARDED_BY(store_mu_);
  // Held while the sink is called (with no other daemon lock): SetDeliverySink(nullptr) waits.
  absl::Mutex sink_mu_;
  DeliverySink* delivery_sink_ ABSL_GUARDED_BY(sink_mu_) = nullptr;

  // The streams' queue, apart from mu_ so a stream never waits for a turn.
  mutable absl::Mutex queue_mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  // Streams waiting for room in queue_ (Admit), resumed when a turn takes the queue.
  std::vector<std::function<void()>> parked_ ABSL_GUARDED_BY(queue_mu_);
  bool wake_ ABSL_GUARDED_BY(queue_mu_) = false;
  // Events applied whose write failed, kept in unsaved_ for the next one: they count against
  // queue_limit, so the streams wait while the record cannot keep them.
  size_t unsaved_events_ ABSL_GUARDED_BY(queue_mu_) = 0;
  uint64_t events_ingested_ ABSL_GUARDED_BY(queue_mu_) = 0;

  // A turn's calls whose commit failed: sent after the next turn's commit succeeds.
  std::vector<AgentCall> unrecorded_calls_ ABSL_GUARDED_BY(store_mu_);
  // The calls sent, a bounded number unanswered at a time.
  CallPacer pacer_;

  // The Logs calls in progress: the destructor cancels them and waits for them to end.
  absl::Mutex logs_mu_;
  std::set<CallCancel*> log_calls_ ABSL_GUARDED_BY(logs_mu_);
  bool logs_closed_ ABSL_GUARDED_BY(logs_mu_) = false;
  absl::CondVar logs_done_;

  absl::Mutex notify_mu_;  // held while subscribers are told: Unsubscribe waits for it
  std::thread loop_;

  const RemediationPlanner planner_;
  std::map<std::string, Fixes> fixes_ ABSL_GUARDED_BY(mu_);  // by container (host/ctid)
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
  // Runs the remediation jobs a turn decided (after the members it uses: destroyed first).
  std::unique_ptr<RemediationRunner> runner_;
  // The runner's results, waiting for a turn.
  std::deque<FixDone> fix_done_ ABSL_GUARDED_BY(queue_mu_);
};

}  // namespace fleet::daemon
