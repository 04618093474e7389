// CommandContext: what every fleetctl verb that talks to fleetd needs from its process: where
// fleetd listens, the per-call timeout, the terminal it writes to, the clock and time zone. main.cc
// fills it from the global flags and the environment; tests fill it with a fake daemon's socket, a
// FakeClock and string streams, and run the verbs in-process.
//
// The context does not own the streams or the clock; they must outlive every call that uses it.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/net/tls_files.h"

namespace fleet::cli {

inline constexpr char kDefaultStateDir[] = "/var/lib/gpu-fleet";
inline constexpr char kSocketName[] = "fleetd.sock";

// fleetd over TCP (`fleetctl --server`, `fleetd --listen`).
struct ServerOptions {
  // host:port, [v6]:port; tried in order (fleet_client.h).
  std::vector<std::string> addresses;
  // Mutual TLS: fleetctl's client certificate and key, and the CA fleetd's certificate must be
  // signed by (it must also name the address dialled).
  net::TlsFiles tls;
  // Plaintext, no TLS: only when asked for by name (--insecure).
  bool insecure = false;
};

struct CommandContext {
  // fleetd's unix socket (the gRPC target is "unix:" + socket_path); used when `servers` has no
  // address.
  std::string socket_path = std::string(kDefaultStateDir) + "/" + kSocketName;
  // fleetd over TCP, when it has addresses (--server, $FLEET_SERVER).
  ServerOptions servers;
  // Deadline of every unary call, and how long a stream may take to deliver its first message.
  absl::Duration timeout = absl::Seconds(10);
  bool stdout_is_tty = false;
  // NO_COLOR is set (and not empty): no colour whatever the terminal.
  bool no_color = false;
  // Human times (STARTED in `attempts`) are shown in this zone; JSON is always UTC.
  absl::TimeZone time_zone = absl::UTCTimeZone();
  // `status --watch` on a terminal redraws this often so ELAPSED moves; zero: only on changes.
  absl::Duration redraw_interval = absl::ZeroDuration();
  // Columns of the terminal, for the human tables on it (lines longer than this would wrap and
  // break the redraw); 0: unknown or not a terminal, every text whole.
  int terminal_width = 0;
  // When set, asked for the width at each redraw of `status --watch` (the terminal may have been
  // resized since); else terminal_width holds.
  std::function<int()> query_terminal_width;
  // How often `status --watch` on a terminal asks fleetd for the plans its REMEDIATING rows wait
  // on (ListRemediations); zero: never.
  absl::Duration remediation_poll_interval = absl::ZeroDuration();
  const Clock* clock = nullptr;
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;

  // Colour for human output: on a terminal, and never when NO_COLOR is set.
  bool color() const { return stdout_is_tty && !no_color; }
  // The terminal's width now (query_terminal_width, else terminal_width); 0: unknown.
  int TerminalWidth() const {
    return query_terminal_width ? query_terminal_width() : terminal_width;
  }
};

}  // namespace fleet::cli
