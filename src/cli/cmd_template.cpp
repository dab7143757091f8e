// `k3 template`: render a chat template (a file, or the built-in Kimi-K3 one) with a JSON
// conversation, to inspect exactly what a model would be fed.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "common/error.h"

namespace {

const char* kUsage = R"(usage: k3 template [options] [INPUT]

Renders a chat template with a JSON conversation and prints the prompt (no trailing newline).

INPUT is a JSON file ('-' or absent: standard input) holding either an object whose keys become
template variables, e.g.
  {"messages": [{"role": "user", "content": "Hi"}], "tools": [...],
   "add_generation_prompt": true, "thinking": false, "thinking_effort": "low",
   "tool_choice": "required", "response_format": {"type": "json_object"}}
or a bare list of messages (then add_generation_prompt defaults to true).

options:
  -t, --template FILE   a Jinja chat template file (default: k3's built-in Kimi-K3 template)
  --var KEY=JSON        set one template variable, e.g. --var thinking=false --var bos_token='"<s>"'
  --normalize           map OpenAI wire messages first: developer -> system, tool-call arguments
                        given as JSON strings -> objects (what k3 serve does)
  --print-builtin       print the built-in Kimi-K3 template and exit
  -h, --help            this help
)";

std::string read_all(std::istream& in) { return std::string(std::istreambuf_iterator<char>(in), {}); }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) k3::fail("cannot open '%s'", path.c_str());
  return read_all(f);
}

int cmd_template(int argc, char** argv) {
  std::string template_path, input_path = "-";
  bool normalize = false;
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) k3::fail("%s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--print-builtin") {
      std::fwrite(k3::chat::kKimiK3Template.data(), 1, k3::chat::kKimiK3Template.size(), stdout);
      return 0;
    } else if (a == "-t" || a == "--template") {
      template_path = value();
    } else if (a == "--normalize") {
      normalize = true;
    } else if (a == "--var") {
      std::string kv = value();
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) k3::fail("--var expects KEY=JSON, got '%s'", kv.c_str());
      auto j = nlohmann::ordered_json::parse(kv.substr(eq + 1), nullptr, false);
      if (j.is_discarded()) k3::fail("--var %s: the value is not valid JSON (quote strings: '\"text\"')", kv.substr(0, eq).c_str());
      vars[kv.substr(0, eq)] = j;
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      k3::fail("unknown option '%s' (see k3 template --help)", a.c_str());
    } else {
      input_path = a;
    }
  }

  std::string text = input_path == "-" ? read_all(std::cin) : read_file(input_path);
  auto input = nlohmann::ordered_json::parse(text, nullptr, false);
  if (input.is_discarded()) k3::fail("%s: not valid JSON", input_path == "-" ? "standard input" : input_path.c_str());
  if (input.is_array()) input = nlohmann::ordered_json{{"messages", input}, {"add_generation_prompt", true}};
  if (!input.is_object()) k3::fail("the input must be a JSON object or a list of messages");
  for (auto it = vars.begin(); it != vars.end(); ++it) input[it.key()] = it.value();
  if (normalize && input.contains("messages")) input["messages"] = k3::chat::normalize_openai_messages(input["messages"]);

  std::string out;
  if (template_path.empty()) {
    out = k3::chat::render_chat(k3::chat::builtin_kimi_k3_template(), input);
  } else {
    std::string src = read_file(template_path);
    std::string name = template_path.substr(template_path.find_last_of('/') + 1);
    k3::jinja::Template t(src, name);
    out = k3::chat::render_chat(t, input);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

K3_COMMAND("template", "render a chat template with a JSON conversation", cmd_template);
