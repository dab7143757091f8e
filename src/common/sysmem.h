// What the machine lets this process use: MemAvailable, lowered by the memory limit of the
// process's cgroup (v2 memory.max, or v1's smallest limit up the hierarchy), so that sizing
// decisions (expert cache, bandwidth probe, page population) hold inside containers.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <vector>

namespace k3 {

// Bytes available to this process before it allocates anything: MemAvailable, or the cgroup's
// limit if lower (0 if nothing can be read). For sizing at start-up.
uint64_t available_memory();
// Bytes this process may still add while `resident` bytes are resident (its RSS): MemAvailable
// (which already counts what is in use), or what the cgroup's limit leaves above `resident`.
uint64_t memory_headroom(uint64_t resident);
// The parts: /proc/meminfo's MemAvailable, and the lowest cgroup memory limit (0: none).
uint64_t mem_available();
uint64_t cgroup_memory_limit();

// The "KEY: N kB" fields of a /proc file (meminfo, self/status, self/smaps_rollup) in bytes, in the
// order of `keys` (each with its colon); 0 for a key the file or the kernel lacks.
std::vector<uint64_t> proc_kb_fields(const char* path, std::initializer_list<std::string_view> keys);

}  // namespace k3
