#include "common/net/http_request_line.h"

namespace fleet::net {

bool ParseRequestLine(std::string_view head, std::string* method, std::string* path) {
  const size_t end = head.find("\r\n");
  const std::string_view line = head.substr(0, end);
  const size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0) return false;
  const size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp2 == sp1 + 1) return false;
  const std::string_view version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return false;
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (target.empty() || target.front() != '/') return false;
  target = target.substr(0, target.find('?'));
  for (char c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  *method = std::string(line.substr(0, sp1));
  *path = std::string(target);
  return true;
}

}  // namespace fleet::net
