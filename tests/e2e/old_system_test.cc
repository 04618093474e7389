// fleet-agent and fleet-http-probe, built here against Debian 12 (glibc 2.36), in an older system:
// a Debian 11 root (glibc 2.31) made with debootstrap, as a user's older container would be. It
// shows that
// - both binaries are static: no program interpreter, no shared library needed;
// - the root's glibc really is 2.31, older than the one they were linked with;
// - inside the root, `fleet-agent --version` and `fleet-http-probe --version` run, and
//   fleet-http-probe checks an HTTP server of this test over loopback (the root shares the
//   test's network, as `pct exec` shares the container's);
// - inside the root, the agent serves agent.proto on `localhost:0`, a name its static glibc
//   resolves through the root's own /etc/nsswitch.conf and /etc/hosts; this test calls it over
//   real gRPC, has it launch a program of the old system, and sees that server READY through the
//   agent's own readiness path: fleet-http-probe, run by the agent inside the root.
//
// Needs root (chroot, and a mount namespace that gives the root /proc and /dev), debootstrap, and
// network on the first run (http://deb.debian.org/debian, or $FLEET_DEBIAN_MIRROR); skips, saying
// which is missing, without them, and when the agent is not linked statically (FLEET_STATIC_AGENT
// off, or FLEET_SANITIZE). The root is made once (about 100 s, 215 MB) and kept in the build tree
// as bullseye-root; a root is used only once complete (made under a lock, then renamed into place).
#include <elf.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/unique_fd.h"
#include "common/base/version.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/agent.grpc.pb.h"
#include "tests/sim/sim_test_support.h"
#include "tests/testing/loopback_server.h"
#include "tests/testing/subprocess.h"

#ifndef FLEET_AGENT_FULLY_STATIC
#error "tests/e2e/CMakeLists.txt defines FLEET_AGENT_FULLY_STATIC"
#endif

namespace fleet {
namespace {

namespace fs = std::filesystem;
using fleet::sim::testing::BackgroundProcess;
using ::testing::HasSubstr;

constexpr char kChildPath[] = "/usr/sbin:/usr/bin:/sbin:/bin";
constexpr char kCompleteMarker[] = ".fleet-root-complete";

std::map<std::string, std::string> ChildEnv() { return {{"PATH", kChildPath}}; }

std::string LastLines(const std::string& text, int n) {
  size_t at = text.size();
  while (n-- > 0 && at > 0) {
    at = text.rfind('\n', at - 1);
    if (at == std::string::npos) return text;
  }
  return text.substr(at + 1);
}

// Why this machine cannot run the test, or nothing when it can.
std::optional<std::string> MissingPrerequisite() {
  if (!FLEET_AGENT_FULLY_STATIC) {
    return "fleet-agent is not linked statically here (FLEET_STATIC_AGENT off, or FLEET_SANITIZE)";
  }
  if (geteuid() != 0) return "needs root: chroot and a mount namespace";
  for (const char* tool : {"debootstrap", "chroot", "unshare", "mount"}) {
    if (testing::FindOnPath(tool, kChildPath).empty()) {
      return absl::StrCat("no ", tool, " on ", kChildPath);
    }
  }
  auto probe =
      testing::Run({"unshare", "--mount", "--propagation", "private", "true"}, {.env = ChildEnv()});
  if (!probe.ok() || !probe->exited || probe->exit_code != 0) {
    return "cannot make a mount namespace here (unshare --mount fails: an unprivileged container?)";
  }
  return std::nullopt;
}

// The Debian 11 root in the build tree, made first when it is not there. Unavailable, with the end
// of debootstrap's output, when it cannot be made.
absl::StatusOr<std::string> OldRoot() {
  const std::string root = testing::BuildPath("bullseye-root");
  const std::string marker = root + "/" + kCompleteMarker;
  if (fs::exists(marker)) return root;
  // Test cases of this binary may run in parallel (ctest -j): one makes the root, the others wait.
  UniqueFd lock(
      open(testing::BuildPath("bullseye-root.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock.valid() || flock(lock.get(), LOCK_EX) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot lock ", root, ".lock"));
  }
  if (fs::exists(marker)) return root;  // made while this one waited

  // What an interrupted run left (the whole of it: a root without its marker is never used).
  const std::string partial = root + ".partial";
  std::error_code ignored;
  fs::remove_all(partial, ignored);
  fs::remove_all(root, ignored);
  const char* mirror_env = getenv("FLEET_DEBIAN_MIRROR");
  const std::string mirror =
      mirror_env != nullptr && mirror_env[0] != '\0' ? mirror_env : "http://deb.debian.org/debian";
  const std::string log = root + ".log";
  fs::remove(log, ignored);
  const auto start = std::chrono::steady_clock::now();
  // In a mount namespace of its own: the /proc and /sys debootstrap mounts in the target vanish
  // with it, whatever happens.
  auto made = testing::Run({"unshare", "--mount", "--propagation", "private", "debootstrap",
                            "--variant=minbase", "bullseye", partial, mirror},
                           {.env = ChildEnv(), .output_path = log});
  if (!made.ok() || !made->exited || made->exit_code != 0) {
    fs::remove_all(partial, ignored);
    return absl::UnavailableError(absl::StrCat(
        "debootstrap of Debian 11 from ", mirror,
        " failed (no network? set FLEET_DEBIAN_MIRROR for another mirror); its last lines:\n",
        LastLines(testing::ReadFile(log), 15)));
  }
  // As a container manager does (LXC, Docker): minbase has no /etc/hosts.
  std::ofstream(partial + "/etc/hosts") << "127.0.0.1 localhost\n::1 localhost ip6-localhost\n";
  std::ofstream(partial + "/" + kCompleteMarker) << mirror << "\n";
  if (rename(partial.c_str(), root.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("rename ", partial, " to ", root));
  }
  std::cout << "made " << root << " in "
            << std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() -
                                                                start)
                   .count()
            << " s\n";
  return root;
}

// `argv` run inside `root`: in a mount namespace of its own that gives the root this machine's
// /proc and /dev, as a container has them, then chroot. Every step execs the next, so the process
// started is the program of argv in the end.
std::vector<std::string> InRoot(const std::string& root, const std::vector<std::string>& argv) {
  std::vector<std::string> out = {
      "unshare",
      "--mount",
      "--propagation",
      "private",
      "--",
      "/bin/sh",
      "-c",
      "mount -t proc proc \"$0/proc\" && mount --bind /dev \"$0/dev\" && exec chroot \"$0\" \"$@\"",
      root};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

// A fresh directory in the root's /tmp with the two binaries in it, removed on destruction.
class Workspace {
 public:
  explicit Workspace(const std::string& root) {
    std::string pattern = root + "/tmp/fleet-old-system-XXXXXX";
    EXPECT_NE(mkdtemp(pattern.data()), nullptr);
    outside_ = pattern;
    inside_ = pattern.substr(root.size());
    for (const char* binary : {"fleet-agent", "fleet-http-probe"}) {
      std::error_code error;
      fs::copy_file(testing::BuildPath(absl::StrCat("agent/", binary)), Outside(binary), error);
      EXPECT_FALSE(error) << binary << ": " << error.message();
      fs::permissions(Outside(binary), fs::perms::owner_all, fs::perm_options::add, error);
    }
  }
  ~Workspace() {
    std::error_code ignored;
    fs::remove_all(outside_, ignored);
  }

  // The path of `name` as this test sees it, and as a process in the root sees it.
  std::string Outside(const std::string& name) const { return outside_ + "/" + name; }
  std::string Inside(const std::string& name) const { return inside_ + "/" + name; }

 private:
  std::string outside_;
  std::string inside_;
};

struct Linkage {
  bool interpreter = false;  // a PT_INTERP: started by a dynamic loader
  int needed = 0;            // DT_NEEDED entries: shared libraries
};

// Read from the ELF headers directly, so that no tool of this machine (ldd, file) has a say.
absl::StatusOr<Linkage> ReadLinkage(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return absl::NotFoundError(path);
  Elf64_Ehdr header;
  if (pread(fd.get(), &header, sizeof(header), 0) != sizeof(header) ||
      memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a 64-bit ELF file"));
  }
  Linkage linkage;
  for (int i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr ph;
    if (pread(fd.get(), &ph, sizeof(ph),
              static_cast<off_t>(header.e_phoff + i * header.e_phentsize)) != sizeof(ph)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": short program header"));
    }
    if (ph.p_type == PT_INTERP) linkage.interpreter = true;
    if (ph.p_type != PT_DYNAMIC) continue;
    std::vector<Elf64_Dyn> dynamic(ph.p_filesz / sizeof(Elf64_Dyn));
    const ssize_t want = static_cast<ssize_t>(dynamic.size() * sizeof(Elf64_Dyn));
    if (pread(fd.get(), dynamic.data(), static_cast<size_t>(want),
              static_cast<off_t>(ph.p_offset)) != want) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": short dynamic section"));
    }
    for (const Elf64_Dyn& d : dynamic) linkage.needed += d.d_tag == DT_NEEDED;
  }
  return linkage;
}

// A loopback HTTP server (port 0) that answers 200 to GET /health_generate and 404 to anything
// else, one request per connection, and records the request lines. Stopped on destruction.
class HealthServer {
 public:
  HealthServer() : server_([this](int conn) { return Serve(conn); }) {}

  int port() const { return server_.port(); }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  bool Serve(int conn) {
    const std::string in = fleet::testing::ReadHttpRequest(conn);
    const std::string line = in.substr(0, in.find("\r\n"));
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(line);
    }
    // A client that gave up meanwhile: its own failure says why.
    fleet::testing::WriteAll(conn, line == "GET /health_generate HTTP/1.1"
                                       ? "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
                                       : "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
    return true;
  }

  std::mutex mu_;
  std::vector<std::string> requests_;
  fleet::testing::LoopbackServer server_;  // last: stopped first
};

class OldSystem : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::optional<std::string> missing = MissingPrerequisite()) GTEST_SKIP() << *missing;
    absl::StatusOr<std::string> made = OldRoot();
    if (!made.ok()) GTEST_SKIP() << "no Debian 11 root: " << made.status().message();
    root_ = *made;
  }

  // `argv` inside the root, to its end; the output in the result.
  testing::RunResult RunInRoot(const std::vector<std::string>& argv) {
    const std::string out = temp_.Join(absl::StrCat("run", ++runs_, ".out"));
    auto run = testing::Run(InRoot(root_, argv), {.env = ChildEnv(), .output_path = out});
    EXPECT_TRUE(run.ok()) << run.status();
    return run.ok() ? *run : testing::RunResult{};
  }

  std::string root_;
  testing::TempDir temp_;
  int runs_ = 0;
};

TEST_F(OldSystem, BothBinariesAreStaticAndRunOnGlibc231) {
  for (const char* binary : {"agent/fleet-agent", "agent/fleet-http-probe"}) {
    absl::StatusOr<Linkage> linkage = ReadLinkage(testing::BuildPath(binary));
    ASSERT_TRUE(linkage.ok()) << linkage.status();
    EXPECT_FALSE(linkage->interpreter) << binary << " needs a dynamic loader";
    EXPECT_EQ(linkage->needed, 0) << binary << " needs shared libraries";
  }

  // The root is the old system it is meant to be: "ldd (Debian GLIBC 2.31-13+deb11u11) 2.31".
  const testing::RunResult ldd = RunInRoot({"/usr/bin/ldd", "--version"});
  const std::string first_line = ldd.output.substr(0, ldd.output.find('\n'));
  EXPECT_TRUE(absl::EndsWith(first_line, " 2.31")) << ldd.output;

  Workspace work(root_);
  const testing::RunResult agent = RunInRoot({work.Inside("fleet-agent"), "--version"});
  EXPECT_TRUE(agent.exited && agent.exit_code == 0) << agent.output;
  EXPECT_THAT(agent.output, HasSubstr(absl::StrCat("fleet-agent ", kVersion, " (")));
  const testing::RunResult probe_version =
      RunInRoot({work.Inside("fleet-http-probe"), "--version"});
  EXPECT_TRUE(probe_version.exited && probe_version.exit_code == 0) << probe_version.output;
  EXPECT_THAT(probe_version.output, HasSubstr(absl::StrCat("fleet-http-probe ", kVersion)));

  // A real check from inside the root of a server outside it, over the shared loopback.
  HealthServer server;
  const testing::RunResult probe =
      RunInRoot({work.Inside("fleet-http-probe"), "--host", "localhost", "--port",
                 absl::StrCat(server.port()), "--path", "/health_generate"});
  EXPECT_TRUE(probe.exited && probe.exit_code == 0) << probe.output;
  EXPECT_EQ(probe.output, "ready 200\n");
  EXPECT_THAT(server.requests(), ::testing::ElementsAre("GET /health_generate HTTP/1.1"));
}

TEST_F(OldSystem, TheAgentServesGrpcAndProbesReadinessInside) {
  Workspace work(root_);
  HealthServer health;
  auto agent = BackgroundProcess::Start(
      InRoot(root_, {work.Inside("fleet-agent"), "--listen", "localhost:0", "--insecure-listen",
                     "--port-file", work.Inside("port"), "--state-dir", work.Inside("state"),
                     "--readiness-interval", "0.1", "--host", "old-system"}),
      ChildEnv(), temp_.Join("agent.log"));
  ASSERT_TRUE(agent.ok()) << agent.status();
  int port = 0;
  const absl::Status serving = (*agent)->WaitUntil(
      [&] {
        return absl::SimpleAtoi(absl::StripAsciiWhitespace(testing::ReadFile(work.Outside("port"))),
                                &port) &&
               port > 0;
      },
      std::chrono::seconds(30));
  ASSERT_TRUE(serving.ok()) << serving << "\n" << (*agent)->Log();

  std::unique_ptr<v1::Agent::Stub> stub = v1::Agent::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  auto deadline = [](grpc::ClientContext* c, int seconds) {
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  };
  {
    grpc::ClientContext c;
    deadline(&c, 10);
    v1::StatusResponse status;
    const grpc::Status s = stub->Status(&c, v1::StatusRequest(), &status);
    ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << (*agent)->Log();
    EXPECT_EQ(status.agent_version(), kVersion);
  }

  // A program of the old system as the server; its readiness is the test's HTTP server.
  v1::LaunchRequest launch;
  launch.set_attempt_id("old-1");
  launch.set_attempt_number(1);
  v1::ServerSpec& spec = *launch.mutable_spec();
  spec.mutable_server()->set_gpu(0);
  spec.add_argv("/bin/sleep");
  spec.add_argv("600");
  (*spec.mutable_env())["PATH"] = "/usr/bin:/bin";
  spec.set_log_path(work.Inside("server.log"));
  spec.set_port(health.port());
  spec.mutable_readiness()->set_path("/health_generate");
  int server_pid = 0;
  {
    grpc::ClientContext c;
    deadline(&c, 10);
    v1::LaunchResponse response;
    const grpc::Status s = stub->Launch(&c, launch, &response);
    ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << (*agent)->Log();
    server_pid = response.status().pid();
  }

  grpc::ClientContext events_context;
  deadline(&events_context, 60);
  std::unique_ptr<grpc::ClientReader<v1::AgentEvent>> events =
      stub->Events(&events_context, v1::EventsRequest());
  auto read_until = [&](const std::function<bool(const v1::AgentEvent&)>& wanted) {
    v1::AgentEvent e;
    std::string seen;
    while (events->Read(&e)) {
      if (wanted(e)) return e;
      absl::StrAppend(&seen, e.ShortDebugString(), "\n");
    }
    ADD_FAILURE() << "the event stream ended first; events:\n" << seen << (*agent)->Log();
    return v1::AgentEvent();
  };
  const v1::AgentEvent ready = read_until([](const v1::AgentEvent& e) { return e.has_ready(); });
  EXPECT_EQ(ready.attempt_id(), "old-1");
  EXPECT_EQ(ready.ready().http_status(), 200);
  ASSERT_FALSE(health.requests().empty());
  EXPECT_EQ(health.requests()[0], "GET /health_generate HTTP/1.1");

  {
    grpc::ClientContext c;
    deadline(&c, 10);
    v1::StopRequest stop;
    stop.mutable_server()->set_gpu(0);
    v1::StopResponse response;
    const grpc::Status s = stub->Stop(&c, stop, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  const v1::AgentEvent exited = read_until([](const v1::AgentEvent& e) { return e.has_exited(); });
  events_context.TryCancel();
  // The agent reaped it once it reported the exit; before that, it may still be there.
  if (!exited.has_exited() && server_pid > 0) kill(server_pid, SIGKILL);

  absl::StatusOr<sim::testing::ExitInfo> exit = (*agent)->Stop(SIGTERM, std::chrono::seconds(20));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited && exit->exit_code == 0) << (*agent)->Log();
}

}  // namespace
}  // namespace fleet
