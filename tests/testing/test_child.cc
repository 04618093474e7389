// fleet-test-child: a stand-in server for process-handling tests, one behaviour per mode:
//   lines N         print N numbered lines, then wait for SIGTERM and exit 0
//   ignore-term     print "ready", ignore SIGTERM, wait (only SIGKILL ends it)
//   crash           print a line, then abort (SIGABRT)
//   exit0-failed    print a real failure (an ImportError traceback) and exit 0
//   quiet           print "loading", then wait with no output and no CPU
//   busy            print "compiling", then burn CPU with no output until SIGTERM
//   forker          start a child that ignores SIGTERM too, print both pids, wait
//   leak VAR        fail with an ImportError whose text holds $VAR's value, exit 0
//   ready-line      print SGLang's ready line but serve nothing, then wait
//   escaper         start a child that moves to a process group of its own (same session) and
//                   burns CPU, print "escaper PID", wait for SIGTERM
//   leftover FILE   start a child that leaves the process group (same session) and keeps FILE
//                   open (a GPU's device node, as CUDA does), print "leftover PID", wait
// Waits are on signals (sigsuspend/pause), never timed.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

volatile sig_atomic_t g_term = 0;
void OnTerm(int) { g_term = 1; }

void WaitForTerm() {
  // pause() after checking the flag could miss a signal in between: block it, then wait
  // atomically with sigsuspend.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigprocmask(SIG_BLOCK, &block, &old);
  while (!g_term) sigsuspend(&old);
  sigprocmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  // Installed before any output: a test that reacts to a printed line may signal at once.
  signal(SIGTERM, OnTerm);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "lines") {
    const int n = argc > 2 ? std::atoi(argv[2]) : 1;
    for (int i = 1; i <= n; ++i) std::printf("line %d\n", i);
    WaitForTerm();
    std::printf("terminated\n");
    return 0;
  }
  if (mode == "ignore-term") {
    signal(SIGTERM, SIG_IGN);
    std::printf("ready\n");
    for (;;) pause();
  }
  if (mode == "crash") {
    std::printf("about to crash\n");
    std::fflush(stdout);
    std::abort();
  }
  if (mode == "exit0-failed") {
    std::printf("Traceback (most recent call last):\n");
    std::printf("  File \"/venv/sgl_kernel/__init__.py\", line 5, in <module>\n");
    std::printf("    from sgl_kernel import common_ops\n");
    std::printf(
        "ImportError: libnvrtc.so.13: cannot open shared object file: No such file or "
        "directory\n");
    return 0;
  }
  if (mode == "quiet") {
    std::printf("loading\n");
    WaitForTerm();
    return 0;
  }
  if (mode == "busy") {
    std::printf("compiling\n");
    std::fflush(stdout);
    signal(SIGTERM, OnTerm);
    volatile uint64_t x = 0;
    while (!g_term) x = x + 1;
    return 0;
  }
  if (mode == "forker") {
    const pid_t child = fork();
    if (child == 0) {
      signal(SIGTERM, SIG_IGN);
      for (;;) pause();
    }
    std::printf("parent %d child %d\n", getpid(), child);
    std::fflush(stdout);
    WaitForTerm();
    return 0;
  }
  if (mode == "leak" && argc > 2) {
    const char* value = std::getenv(argv[2]);
    std::printf("ImportError: libnvrtc.so.13: cannot open shared object file (token %s)\n",
                value != nullptr ? value : "");
    return 0;
  }
  if (mode == "ready-line") {
    std::printf("[2026-11-29 10:00:00] The server is fired up and ready to roll!\n");
    WaitForTerm();
    return 0;
  }
  if (mode == "escaper") {
    const pid_t child = fork();
    if (child == 0) {
      setpgid(0, 0);
      volatile uint64_t x = 0;
      for (;;) x = x + 1;
    }
    std::printf("escaper %d\n", child);
    std::fflush(stdout);
    WaitForTerm();
    return 0;
  }
  if (mode == "leftover" && argc > 2) {
    int ready[2];
    if (pipe(ready) != 0) return 3;
    const pid_t child = fork();
    if (child == 0) {
      setpgid(0, 0);
      const int fd = open(argv[2], O_RDONLY);
      const char c = fd >= 0 ? 'k' : 'e';
      if (write(ready[1], &c, 1) != 1) _exit(1);
      for (;;) pause();
    }
    close(ready[1]);
    char c = 0;
    if (read(ready[0], &c, 1) != 1 || c != 'k') return 3;
    std::printf("leftover %d\n", child);
    std::fflush(stdout);
    WaitForTerm();
    return 0;
  }
  std::fprintf(stderr, "fleet-test-child: unknown mode '%s'\n", mode.c_str());
  return 2;
}
