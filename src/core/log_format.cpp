#include "log_format.h"

#include <cstdio>
#include <cstring>

namespace mk {
namespace {

const char* kind_name(int kind) {
  switch (kind) {
    case MK_LOG_INT: return "int";
    case MK_LOG_UINT: return "unsigned";
    case MK_LOG_FLOAT: return "float";
    case MK_LOG_STRING: return "string";
    default: return "pointer";
  }
}

template <class T> void append(std::string& out, const std::string& spec, T value) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, spec.c_str(), value);
  if (n < 0) return;
  if (size_t(n) < sizeof buf) {
    out.append(buf, size_t(n));
    return;
  }
  std::string big(size_t(n) + 1, '\0');
  std::snprintf(&big[0], big.size(), spec.c_str(), value);
  out.append(big.data(), size_t(n));
}

// The bits of an integer argument at the width a length modifier (or else the argument) gives.
unsigned long long at_width(const mk_log_arg& a, const std::string& length, bool is_signed) {
  int bytes = a.size;
  if (length == "hh") bytes = 1;
  else if (length == "h") bytes = 2;
  else if (!length.empty()) bytes = 8;
  unsigned long long v = a.bits;
  if (bytes >= 8) return v;
  const unsigned bits = unsigned(bytes) * 8;
  v &= (1ull << bits) - 1;
  if (is_signed && (v >> (bits - 1)) & 1) v |= ~0ull << bits;  // sign-extend back
  return v;
}

}  // namespace

std::string format_log(const char* format, const mk_log_arg* args, int nargs) {
  std::string out;
  int next = 0;
  const char* p = format ? format : "";
  while (*p) {
    if (*p != '%') {
      const char* q = std::strchr(p, '%');
      size_t n = q ? size_t(q - p) : std::strlen(p);
      out.append(p, n);
      p += n;
      continue;
    }
    const char* start = p++;
    if (*p == '%') {
      out += '%';
      ++p;
      continue;
    }
    if (*p == '{') {  // os_log's %{public}, %{private}: a privacy annotation, not printed
      const char* close = std::strchr(p, '}');
      if (close) p = close + 1;
    }
    std::string spec = "%";
    while (*p && std::strchr("-+ #0'", *p)) spec += *p++;
    bool bad = false;
    auto number = [&](bool allow_star) {
      if (allow_star && *p == '*') {
        ++p;
        if (next < nargs && (args[next].kind == MK_LOG_INT || args[next].kind == MK_LOG_UINT))
          spec += std::to_string(int(args[next++].bits));
        else
          bad = true;
        return;
      }
      while (*p >= '0' && *p <= '9') spec += *p++;
    };
    number(true);
    if (*p == '.') {
      spec += *p++;
      number(true);
    }
    std::string length;
    while (*p && std::strchr("hljztLq", *p)) length += *p++;
    const char conv = *p;
    if (!conv) {  // a lone '%' at the end
      out.append(start);
      break;
    }
    ++p;
    const std::string written(start, size_t(p - start));
    if (conv == 'n') continue;
    if (!std::strchr("diuoxXcspfFeEgGaA", conv)) {  // not a conversion: print it as written
      out += written;
      continue;
    }
    if (bad || next >= nargs) {
      out += "<" + written + ": no argument>";
      continue;
    }
    const mk_log_arg& a = args[next++];
    const bool integer = a.kind == MK_LOG_INT || a.kind == MK_LOG_UINT;
    bool fits;
    switch (conv) {
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A':
        fits = a.kind == MK_LOG_FLOAT;
        break;
      case 's': fits = a.kind == MK_LOG_STRING; break;
      case 'p': fits = a.kind == MK_LOG_POINTER; break;
      default: fits = integer;
    }
    if (!fits) {
      out += "<" + written + ": " + kind_name(a.kind) + " argument>";
      continue;
    }
    switch (conv) {
      case 'd': case 'i':
        append(out, spec + "lld", (long long)at_width(a, length, true));
        break;
      case 'u': case 'o': case 'x': case 'X':
        append(out, spec + "ll" + conv, at_width(a, length, false));
        break;
      case 'c': append(out, spec + "c", int((unsigned char)a.bits)); break;
      case 's': append(out, spec + "s", a.s ? a.s : "(null)"); break;
      case 'p': append(out, spec + "p", (const void*)(uintptr_t)a.bits); break;
      default: append(out, spec + conv, a.f);
    }
  }
  return out;
}

}  // namespace mk
