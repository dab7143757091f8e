// llama.cpp's slot API: GET /slots, and POST /slots/{id}?action=save|restore|erase with
// {"filename": "NAME"} under --slot-save-path. A slot's cache is the token sequence of its last
// request; a save writes that sequence's deepest cached state from the prompt cache with its KDA
// snapshots (up to four: the end of the generation, the end of the prompt and the message starts
// before it), a restore puts a file's states back into the prompt cache, where any request whose
// prompt begins with those tokens finds them. Under mpirun each process saves and restores its share
// (NAME for the leader, NAME.rank-R beside it for process R: docs/multinode.md).
#include <chrono>

#include "cache/file.h"
#include "server/context.h"

namespace k3::server {

namespace {

// The value of `name` in the request's query string ("" if absent).
std::string query_param(const Request& req, std::string_view name) {
  const size_t q = req.target.find('?');
  if (q == std::string::npos) return "";
  std::string_view rest = std::string_view(req.target).substr(q + 1);
  while (!rest.empty()) {
    const std::string_view kv = rest.substr(0, rest.find('&'));
    rest = kv.size() < rest.size() ? rest.substr(kv.size() + 1) : std::string_view();
    const size_t eq = kv.find('=');
    if (kv.substr(0, eq) == name) return std::string(eq == std::string_view::npos ? "" : kv.substr(eq + 1));
  }
  return "";
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A plain file name inside --slot-save-path (no directories, nothing hidden).
std::string slot_file(const ServerCtx& c, const json& body) {
  if (c.opt.slot_save_path.empty())
    throw ApiError(400, "slot save and restore need the server to be started with --slot-save-path DIR", "action");
  Fields f(body, "");
  f.only({"filename"});
  const std::string name = f.str("filename", "", true);
  bool ok = !name.empty() && name.size() <= 255 && name[0] != '.';
  for (unsigned char ch : name) ok = ok && ch >= 0x20 && ch != '/' && ch != '\\' && ch != 0x7f;
  if (!ok)
    throw ApiError(400, "'filename' must be a plain file name (no '/', '\\\\', control characters or leading '.')",
                   "filename");
  return c.opt.slot_save_path + "/" + name;
}

}  // namespace

void handle_slots(ServerCtx& c, const Request&, Response& res) {
  json out = json::array();
  for (const Engine::SlotInfo& s : c.engine->slots())
    out.push_back({{"id", s.id},
                   {"n_ctx", c.engine->options().n_ctx},
                   {"is_processing", s.busy},
                   {"n_tokens", s.last.size()}});
  reply_json(res, out);
}

void handle_slot_action(ServerCtx& c, const Request& req, Response& res) {
  const std::string action = query_param(req, "action");
  if (action != "save" && action != "restore" && action != "erase")
    throw ApiError(400, "'action' must be save, restore or erase", "action");
  const std::vector<Engine::SlotInfo> slots = c.engine->slots();
  const long long id = std::stoll(req.path.substr(req.path.find_last_of('/') + 1));  // routes: /slots/0 .. /slots/P-1
  const Engine::SlotInfo& slot = slots.at(static_cast<size_t>(id));
  if (slot.busy) throw ApiError(409, strprintf("slot %lld is processing a request; retry when it is idle", id), "id_slot");
  if (!c.cache) throw ApiError(400, "the prompt cache is off (--cache-ram 0), so slots keep no state", "action");
  const auto t0 = std::chrono::steady_clock::now();
  if (action == "erase") {
    c.cache->erase(cache::Key{slot.last, {}});
    c.engine->set_last(static_cast<int>(id), {});
    return reply_json(res, json{{"id_slot", id}, {"n_erased", slot.last.size()}});
  }
  const std::string path = slot_file(c, parse_body(req.body, c.opt.max_json_depth));
  const std::string name = path.substr(path.find_last_of('/') + 1);
  if (action == "save") {
    if (slot.last.empty()) throw ApiError(400, strprintf("slot %lld holds no sequence to save", id), "id_slot");
    cache::PrefixCache::Saved s;
    try {
      // between two steps: under mpirun every process writes its share
      c.engine->exclusive([&] { s = c.cache->save(path, cache::Key{slot.last, {}}, json{{"slot", id}, {"model", c.model_id}}); });
    } catch (const cache::FileError& e) {
      throw ApiError(500, std::string("cannot save the slot: ") + e.what());
    } catch (const Error& e) {
      throw ApiError(400, std::string("cannot save the slot: ") + e.what(), "id_slot");
    }
    return reply_json(res, json{{"id_slot", id},
                                {"filename", name},
                                {"n_saved", s.n_tokens},
                                {"n_written", s.bytes},
                                {"n_snapshots", s.snapshots},
                                {"timings", {{"save_ms", ms_since(t0)}}}});
  }
  cache::PrefixCache::Loaded l;
  try {
    c.engine->exclusive([&] { l = c.cache->load(path); });
  } catch (const cache::FileError& e) {
    throw ApiError(e.kind == cache::FileError::Missing ? 404 : 400, std::string("cannot restore the slot: ") + e.what(),
                   "filename");
  }
  const size_t n = l.ids.size();
  c.engine->set_last(static_cast<int>(id), std::move(l.ids));
  reply_json(res, json{{"id_slot", id},
                       {"filename", name},
                       {"n_restored", n},
                       {"n_read", l.bytes},
                       {"n_snapshots", l.snapshots},
                       {"timings", {{"restore_ms", ms_since(t0)}}}});
}

}  // namespace k3::server
