// The routes agent clients speak: POST /v1/messages (+ count_tokens), Anthropic Messages; POST
// /v1/responses (+ input_tokens), OpenAI Responses. Each converts its request to the internal
// conversation and runs the chat pipeline (routes_chat.cpp) with its protocol's answer.
#include "server/context.h"

namespace k3::server {

void handle_messages(ServerCtx& c, const Request& req, Response& res) {
  const ChatRequest r = parse_anthropic_request(parse_body(req.body, c.opt.max_json_depth), c.limits, false);
  run_chat(c, r, anthropic_protocol(r.model), res);
}

void handle_count_tokens(ServerCtx& c, const Request& req, Response& res) {
  const ChatRequest r = parse_anthropic_request(parse_body(req.body, c.opt.max_json_depth), c.limits, true);
  reply_json(res, json{{"input_tokens", chat_prompt(c, r).ids.size()}});
}

void handle_responses(ServerCtx& c, const Request& req, Response& res) {
  const json body = parse_body(req.body, c.opt.max_json_depth);
  const ChatRequest r = parse_responses_request(body, c.limits);
  const tok::Tokenizer& tok = *c.tok;
  auto count = [&tok](std::string_view s) { return static_cast<int32_t>(tok.encode(s, false).size()); };
  run_chat(c, r, responses_protocol(body, r, r.model.empty() ? c.model_id : r.model, count), res);
}

void handle_input_tokens(ServerCtx& c, const Request& req, Response& res) {
  const ChatRequest r = parse_responses_request(parse_body(req.body, c.opt.max_json_depth), c.limits);
  reply_json(res, json{{"object", "response.input_tokens"}, {"input_tokens", chat_prompt(c, r).ids.size()}});
}

}  // namespace k3::server
