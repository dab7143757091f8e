// Python str operations on UTF-8 text, shared by filters and string methods. Case mapping covers
// ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic; other scripts are left unchanged.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"

namespace k3::jinja::text {

std::string lower(std::string_view s);
std::string upper(std::string_view s);
std::string capitalize(std::string_view s);   // str.capitalize()
std::string title(std::string_view s);        // str.title()
std::string swapcase(std::string_view s);
bool is_space(uint32_t cp);                    // str.isspace() for one code point
// str.strip / lstrip / rstrip; chars == nullopt strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit) / str.rsplit; sep == nullopt splits on whitespace runs.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit, bool from_right);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);
std::string html_escape(std::string_view s);
// "fmt % args" (printf-style: %s %r %d %i %f %e %g %x %o %c %%, flags, width, precision).
std::string percent_format(std::string_view fmt, const std::vector<Value>& args);
// str.format(*args, **kwargs) with {}, {0}, {name} and simple format specs.
std::string brace_format(std::string_view fmt, const Args& args);

}  // namespace k3::jinja::text
