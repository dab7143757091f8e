# Writes the template file IN into OUT as a C++ string constant (k3::chat::kKimiK3Template).
file(READ ${IN} content HEX)
string(LENGTH "${content}" n)
set(bytes "")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${content}")
file(WRITE ${OUT} "// Generated from data/templates/kimi-k3.jinja; do not edit.\n#include <string_view>\nnamespace k3::chat {\nstatic const char kData[] = {${bytes} 0};\nextern const std::string_view kKimiK3Template(kData, sizeof(kData) - 1);\n}  // namespace k3::chat\n")
