// Who may share cached states, and how much memory and disk the cache may take.
#pragma once
#include <cstdint>
#include <string>

#include "cache/file.h"
#include "model/model.h"

namespace k3::cache {

// The identity of everything that decides a state's bits and a prompt's tokens: the model file
// (every GGUF header, metadata and tokenizer included, and the first and last 4 KiB of each
// tensor's data, so two files of the same shape but other weights differ), the chat template
// (template_hash of its text), the kernels in use (ISA) and the F16 rule, and under mpirun the
// process's share (placement: its files hold that share only); `about` names them for messages.
Identity identity_of(const model::Model& m, uint64_t template_hash, const std::string& compute);
uint64_t template_hash(const std::string& text);
// The compute part: the kernels in use (K3_ISA) and the F16 rule.
std::string compute_of(model::F16Rule rule);

// "0", "512M", "8G", "1.5T", plain bytes; K/M/G/T are powers of 1024. Throws naming the flag.
int64_t parse_size(const std::string& s, const char* flag);
std::string format_size(uint64_t bytes);  // "1.5 GiB"

// Bytes of the model's mapped files.
uint64_t mapped_bytes(const model::Model& m);
// --cache-ram auto: half of the memory left to this process (MemAvailable, or the cgroup limit
// minus its usage when lower), less the model's mapped file bytes that MemAvailable counts as
// reclaimable, less `reserve` (the slots' own states).
int64_t auto_ram_budget(uint64_t model_bytes, uint64_t reserve);
// --cache-disk auto: half of the free space of dir.
int64_t auto_disk_budget(const std::string& dir);

}  // namespace k3::cache
