// The OpenAI Responses answer: reasoning -> a reasoning item (one reasoning_text part; with include
// reasoning.encrypted_content also the text as k3's encrypted_content), content -> a message item
// (one output_text part), each tool call -> a function_call item (with `namespace` for a function of
// a namespace tool) or a custom_tool_call item (a custom tool: its `input` argument), in the order
// the parser gives them. Streaming sends
//   response.created, response.in_progress,
//   per item: response.output_item.added, [response.content_part.added],
//             response.{reasoning_text,output_text,function_call_arguments}.delta*, *.done,
//             (a custom tool call: one response.custom_tool_call_input.delta when its input is whole, .done),
//             [response.content_part.done], response.output_item.done
//   response.completed (response.incomplete when the token budget ran out)
// with sequence numbers from 0; the non-streaming body is the response object of the last event.
#include <algorithm>
#include <cstdio>

#include "common/base64.h"
#include "server/chat_protocol.h"
#include "server/requests.h"

namespace k3::server {

namespace {

// A float setting as the decimal it was given as (0.8, not 0.800000011920929).
json decimal(float x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.7g", x);
  return json::parse(b);
}

class Responses final : public ChatProtocol {
 public:
  Responses(const json& request, const ChatRequest& r, std::string model, std::function<int32_t(std::string_view)> count)
      : model_(std::move(model)), count_tokens_(std::move(count)), origins_(r.tool_origins) {
    if (request.contains("include") && request["include"].is_array()) {
      const json& inc = request["include"];
      encrypted_ = std::find(inc.begin(), inc.end(), "reasoning.encrypted_content") != inc.end();
    }
    auto echo = [&](const char* key, json def) { echo_[key] = request.contains(key) && !request[key].is_null() ? request[key] : def; };
    echo("instructions", nullptr);
    echo("max_output_tokens", nullptr);
    echo("metadata", json::object());
    echo("parallel_tool_calls", true);
    echo("tool_choice", "auto");
    echo("tools", json::array());
    echo("text", {{"format", {{"type", "text"}}}});
    echo("truncation", "disabled");
    echo("user", nullptr);
    json effort = request.contains("reasoning") && request["reasoning"].is_object() && request["reasoning"].contains("effort")
                      ? request["reasoning"]["effort"]
                      : json(nullptr);
    echo_["reasoning"] = {{"effort", effort}, {"summary", nullptr}};
    echo_["temperature"] = decimal(r.gen.sampling.temp);
    echo_["top_p"] = decimal(r.gen.sampling.top_p);
  }

  void begin(int32_t, int32_t, SseEvents& out) override {
    const json r = response("in_progress", nullptr);
    out.push_back(event("response.created", {{"response", r}}));
    out.push_back(event("response.in_progress", {{"response", r}}));
  }

  void delta(const chat::ChatDelta& d, SseEvents& out) override {
    if (!d.reasoning_content.empty()) append(Kind::Reasoning, d.reasoning_content, out);
    if (!d.content.empty()) append(Kind::Message, d.content, out);
    for (const chat::ToolCallDelta& t : d.tool_calls) {
      if (t.opens) {
        close("completed", out);
        Item it{Kind::Call, "", "", random_id("call_"), t.name};
        if (auto o = origins_.find(t.name); o != origins_.end()) {
          it.name = o->second.name;
          it.ns = o->second.ns;
          it.custom = o->second.custom;
        }
        it.id = random_id(it.custom ? "ctc_" : "fc_");
        open(std::move(it), out);
      }
      // The parser gives a call's arguments before the next call opens: they belong to the last item.
      if (!t.arguments.empty()) append(Kind::Call, t.arguments, out);
    }
  }

  void end(const ChatOutcome& o, SseEvents& out) override {
    close(o.stop == ChatOutcome::Stop::Length ? "incomplete" : "completed", out);
    json r = body(o);
    const std::string name = r["status"] == "incomplete" ? "response.incomplete" : "response.completed";
    out.push_back(event(name, {{"response", std::move(r)}}));
  }

  void fail(int status, const std::string& message, SseEvents& out) override {
    close("incomplete", out);
    json error = {{"code", status == 503 ? "server_is_overloaded" : "server_error"}, {"message", message}};
    out.push_back(event("response.failed", {{"response", response("failed", nullptr, std::move(error))}}));
  }

  json body(const ChatOutcome& o) override {
    const bool incomplete = o.stop == ChatOutcome::Stop::Length;
    if (open_) items_.back().status = incomplete ? "incomplete" : "completed";
    int32_t reasoning = 0;
    for (const Item& it : items_)
      if (it.kind == Kind::Reasoning) reasoning += count_tokens_(it.text);
    json usage = {{"input_tokens", o.n_prompt},
                  {"input_tokens_details", {{"cached_tokens", o.n_cached}}},
                  {"output_tokens", o.n_gen},
                  {"output_tokens_details", {{"reasoning_tokens", std::min(reasoning, o.n_gen)}}},
                  {"total_tokens", o.n_prompt + o.n_gen}};
    json r = response(incomplete ? "incomplete" : "completed", std::move(usage));
    if (incomplete) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    else r["completed_at"] = unix_now();
    return r;
  }

 private:
  enum class Kind { Reasoning, Message, Call };
  struct Item {
    Kind kind;
    std::string id, text;  // reasoning or output text, or the call's arguments
    std::string call_id, name;
    std::string status = "in_progress";
    std::string ns = "";  // a function of this namespace
    bool custom = false;  // a custom tool: text holds {"input": ...}
  };

  // A custom tool call's input: the `input` argument once the arguments are whole ("" before).
  static std::string custom_input(const Item& it) {
    const json args = json::parse(it.text, nullptr, false);
    return args.is_object() && args.contains("input") && args["input"].is_string() ? args["input"].get<std::string>() : "";
  }

  SseEvent event(const std::string& type, json fields) {
    json e = {{"type", type}};
    e.update(fields);
    e["sequence_number"] = seq_++;
    return sse_event(type, e);
  }
  // An event about the last item.
  SseEvent item_event(const std::string& type, json fields) {
    json e = {{"item_id", items_.back().id}, {"output_index", items_.size() - 1}};
    if (items_.back().kind != Kind::Call) e["content_index"] = 0;
    e.update(fields);
    return event(type, std::move(e));
  }

  static json part_json(const Item& it) {
    if (it.kind == Kind::Reasoning) return {{"type", "reasoning_text"}, {"text", it.text}};
    return {{"type", "output_text"}, {"text", it.text}, {"annotations", json::array()}, {"logprobs", json::array()}};
  }
  json item_json(const Item& it) const {
    switch (it.kind) {
      case Kind::Reasoning: {
        const bool done = it.status != "in_progress";
        json r = {{"id", it.id},
                  {"type", "reasoning"},
                  {"summary", json::array()},
                  {"content", done ? json::array({part_json(it)}) : json::array()},
                  {"status", it.status}};
        if (encrypted_) r["encrypted_content"] = done ? json(encode_reasoning(it.text)) : json(nullptr);
        return r;
      }
      case Kind::Message:
        return {{"id", it.id},
                {"type", "message"},
                {"role", "assistant"},
                {"status", it.status},
                {"content", it.status == "in_progress" ? json::array() : json::array({part_json(it)})}};
      case Kind::Call: break;
    }
    json c = {{"id", it.id}, {"type", it.custom ? "custom_tool_call" : "function_call"}, {"status", it.status}};
    if (it.custom) c["input"] = it.status == "in_progress" ? "" : custom_input(it);
    else c["arguments"] = it.text;
    c["call_id"] = it.call_id;
    c["name"] = it.name;
    if (!it.ns.empty()) c["namespace"] = it.ns;
    return c;
  }

  void open(Item it, SseEvents& out) {
    items_.push_back(std::move(it));
    open_ = true;
    out.push_back(event("response.output_item.added", {{"output_index", items_.size() - 1}, {"item", item_json(items_.back())}}));
    if (items_.back().kind != Kind::Call) out.push_back(item_event("response.content_part.added", {{"part", part_json(items_.back())}}));
  }

  // Adds text to the open item of this kind, or (reasoning, message) opens one.
  void append(Kind kind, const std::string& text, SseEvents& out) {
    if (kind != Kind::Call && (!open_ || items_.back().kind != kind)) {
      close("completed", out);
      open(Item{kind, random_id(kind == Kind::Reasoning ? "rs_" : "msg_"), "", "", ""}, out);
    }
    items_.back().text += text;
    if (items_.back().custom) return;  // its input is sent whole when the call closes
    const char* type = kind == Kind::Reasoning ? "response.reasoning_text.delta"
                       : kind == Kind::Message ? "response.output_text.delta"
                                               : "response.function_call_arguments.delta";
    json fields = {{"delta", text}};
    if (kind == Kind::Message) fields["logprobs"] = json::array();
    out.push_back(item_event(type, std::move(fields)));
  }

  void close(const char* status, SseEvents& out) {
    if (!open_) return;
    open_ = false;
    Item& it = items_.back();
    it.status = status;
    if (it.custom) {
      const std::string input = custom_input(it);
      if (!input.empty()) out.push_back(item_event("response.custom_tool_call_input.delta", {{"delta", input}}));
      out.push_back(item_event("response.custom_tool_call_input.done", {{"input", input}}));
    } else if (it.kind == Kind::Call) {
      out.push_back(item_event("response.function_call_arguments.done", {{"arguments", it.text}, {"name", it.name}}));
    } else {
      json done = {{"text", it.text}};
      if (it.kind == Kind::Message) done["logprobs"] = json::array();
      out.push_back(item_event(it.kind == Kind::Message ? "response.output_text.done" : "response.reasoning_text.done", done));
      out.push_back(item_event("response.content_part.done", {{"part", part_json(it)}}));
    }
    out.push_back(event("response.output_item.done", {{"output_index", items_.size() - 1}, {"item", item_json(it)}}));
  }

  json response(const char* status, json usage, json error = nullptr) const {
    json output = json::array();
    if (std::string(status) != "in_progress")
      for (const Item& it : items_) output.push_back(item_json(it));
    json r = {{"id", id_},
              {"object", "response"},
              {"created_at", created_},
              {"status", status},
              {"background", false},
              {"error", std::move(error)},
              {"incomplete_details", nullptr},
              {"model", model_},
              {"output", std::move(output)},
              {"previous_response_id", nullptr},
              {"store", false},
              {"usage", std::move(usage)}};
    r.update(echo_);
    return r;
  }

  std::string id_ = random_id("resp_");
  int64_t created_ = unix_now();
  std::string model_;
  std::function<int32_t(std::string_view)> count_tokens_;
  std::map<std::string, ToolOrigin> origins_;  // tools the model knows by other names (namespaces, custom)
  bool encrypted_ = false;                      // include: reasoning.encrypted_content
  json echo_ = json::object();  // request fields the response object repeats
  std::vector<Item> items_;
  bool open_ = false;  // the last item is open (streaming: added, not done)
  int64_t seq_ = 0;
};

}  // namespace

std::string encode_reasoning(std::string_view text) { return std::string(kReasoningPrefix) + base64_encode(text); }

std::unique_ptr<ChatProtocol> responses_protocol(const json& request, const ChatRequest& r, std::string model,
                                                 std::function<int32_t(std::string_view)> count_tokens) {
  return std::make_unique<Responses>(request, r, std::move(model), std::move(count_tokens));
}

}  // namespace k3::server
