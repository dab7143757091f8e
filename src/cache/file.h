// The prompt-cache file (disk tier entries, slot saves, chat sessions, k3 run --prompt-cache): one
// path of the tree, its tokens, its MLA rows and the snapshots at some of its positions.
//
//   "K3PCACHE" | u32 version | u32 H | header: H bytes of JSON | u64 XXH3-64 of all bytes before it
//   ids: i32[n] | content hashes: u64[n] (only when the path has any)
//   piece j, for each snapshot position p_j (ascending, the last is n): MLA rows of positions
//   [p_{j-1}, p_j) layer by layer ([mla layer][p_j - p_{j-1}][row] f32), with a draft's side rows
//   ([p_j - p_{j-1}][side] f32) after them, then the snapshot ([kda floats + n_vocab] f32)
//
// The header names the identity (model, tokenizer, template, compute: see identity.h), the
// layout, n, the snapshot positions, the XXH3-64 of the ids and of each piece, and an `extra`
// JSON value (a chat session's history). Little-endian, as every x86 host writes it. A file is
// written under a temporary name in its directory, synced, then renamed.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/state_copy.h"
#include "common/error.h"

namespace k3::cache {

inline constexpr uint32_t kFileVersion = 1;

// Who may use a file: the hash must match; `about` says in words what it was made from.
struct Identity {
  uint64_t hash = 0;
  std::string about;
};

class FileError : public Error {
 public:
  // Partial: this process's file is good, another process of an mpirun job could not use its own
  enum Kind { Missing, Foreign, Corrupt, Io, NoSpace, Partial };
  FileError(Kind k, const std::string& msg) : Error(msg), kind(k) {}
  Kind kind;
};

// A path to write: rows cover positions [0, n) in order; snapshots ascending, the last at n.
struct PathData {
  std::vector<int32_t> ids;
  std::vector<uint64_t> content;
  std::vector<std::shared_ptr<const Rows>> rows;
  std::vector<std::shared_ptr<const Snapshot>> snaps;
};

// Writes `p` to `path` through `tmp` (same directory). Throws FileError (NoSpace when the disk
// or a file-size limit refused the bytes; the temporary file is removed). Returns the bytes.
uint64_t write_file(const std::string& path, const std::string& tmp, const Layout& l, const Identity& id,
                    const PathData& p, const nlohmann::ordered_json& extra = nullptr);

// A file's header and ids, checked: magic, version, header checksum, identity, layout, the size
// the header implies, the ids' checksum. Throws FileError naming the file.
struct FileInfo {
  std::string path;
  std::vector<int32_t> ids;
  std::vector<uint64_t> content;
  std::vector<int64_t> snaps;  // positions
  nlohmann::ordered_json extra;
  uint64_t bytes = 0;
  uint64_t data_off = 0;             // where the ids start
  std::vector<uint64_t> pieces_xxh;  // one per snapshot
};
FileInfo read_info(const std::string& path, const Layout& l, const Identity& id);

// Reads pieces 0..last: every MLA row up to snaps[last] into st (reset first; its KDA states are
// left to apply_snapshot) and the snapshots, each piece checked against its checksum. On any error
// st is reset and FileError thrown.
std::vector<std::shared_ptr<Snapshot>> read_pieces(const FileInfo& f, size_t last, const Layout& l, model::State& st);

}  // namespace k3::cache
