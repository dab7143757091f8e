#include "multinode/mpi_group.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/error.h"

namespace k3::multinode {

using Clock = std::chrono::steady_clock;

namespace {

constexpr int kStreamTag = 11, kLogitsTag = 12;
// Words of the first broadcast of a message (a decode pass fits; longer ones take a second).
constexpr int kInlineWords = 64;

int as_count(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX))
    fail("%s: %zu values in one message, more than MPI's int counts allow (use a smaller batch)", what, n);
  return static_cast<int>(n);
}

}  // namespace

MpiGroup::MpiGroup(int pp) {
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  if (pp < 1 || world_size_ % pp != 0)
    fail("--pp %d: the %d processes do not make %d stages of equal size (start a multiple of %d with mpirun -np)",
         pp, world_size_, pp, pp);
  place_ = model::placement_of(world_rank_, world_size_, pp);
  MPI_Comm_split(MPI_COMM_WORLD, place_.stage, world_rank_, &tp_comm_);
  counts_.resize(place_.tp_size), displs_.resize(place_.tp_size);
}

MpiGroup::~MpiGroup() {
  if (tp_comm_ != MPI_COMM_NULL) MPI_Comm_free(&tp_comm_);
}

void MpiGroup::add_time(Clock::time_point t0) {
  cnt_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  ++cnt_.messages;
}

// A non-blocking collective's wait. Quiet: the others waiting for the leader's next message spin
// briefly (a decode step's message comes within microseconds), then sleep between polls.
void MpiGroup::wait(MPI_Request& r, bool quiet) {
  if (!quiet) {
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    return;
  }
  const auto t0 = Clock::now();
  int done = 0;
  auto sleep = std::chrono::microseconds(20);
  for (;;) {
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (Clock::now() - t0 < std::chrono::milliseconds(2)) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
  }
}

int64_t MpiGroup::share(int64_t full, int64_t unit, int r) const {
  return model::share_begin(full / unit, place_.tp_size, r) * unit;
}

// ---- the leader's messages ----

// The leader's side. Only passes count in the figures (not the messages that ask for them).
void MpiGroup::bcast(std::vector<int64_t>& w, bool count) {
  // w[0] = payload words; the first broadcast carries up to kInlineWords - 1 of them
  const Counters before = cnt_;
  const size_t total = w.size();
  w.resize(std::max<size_t>(total, kInlineWords));
  MPI_Request r;
  const auto t0 = Clock::now();
  MPI_Ibcast(w.data(), kInlineWords, MPI_INT64_T, 0, MPI_COMM_WORLD, &r);
  wait(r, false);
  add_time(t0);
  if (total > static_cast<size_t>(kInlineWords)) {
    const auto t1 = Clock::now();
    MPI_Ibcast(w.data() + kInlineWords, as_count(total - kInlineWords, "pass"), MPI_INT64_T, 0, MPI_COMM_WORLD, &r);
    wait(r, false);
    add_time(t1);
  }
  if (!count) cnt_ = before;
}

std::vector<int64_t> MpiGroup::take_ops() {
  std::lock_guard<std::mutex> lk(mu_);
  return std::exchange(ops_, {});
}

void MpiGroup::queue(OpKind kind, std::span<const int64_t> payload) {
  std::lock_guard<std::mutex> lk(mu_);
  ops_.insert(ops_.end(), {static_cast<int64_t>(kind), static_cast<int64_t>(payload.size())});
  ops_.insert(ops_.end(), payload.begin(), payload.end());
}

void MpiGroup::announce(std::span<const model::Segment> batch, const model::RunOptions& opt, int64_t n_embd) {
  if (world_rank_ != 0 || world_size_ == 1) return;
  const std::vector<int64_t> ops = take_ops();
  int64_t n_ids = 0, n_rows = 0, n_values = 0;
  for (const model::Segment& s : batch) {
    n_ids += s.n, n_rows += static_cast<int64_t>(s.rows.size());
    for (const model::InputRows& r : s.rows) n_values += r.n * n_embd;
  }
  row_data_.clear();
  std::vector<int64_t>& w = words_;  // [length, op, f16 rule, counts..., operations, segments, rows, ids]
  w.assign({0, static_cast<int64_t>(Op::Pass), static_cast<int64_t>(opt.f16_rule), static_cast<int64_t>(ops.size()),
            static_cast<int64_t>(batch.size()), n_rows, n_ids, n_values});
  w.insert(w.end(), ops.begin(), ops.end());
  for (const model::Segment& s : batch)
    w.insert(w.end(), {static_cast<int64_t>(s.state->id()), s.state->n_ctx(), s.state->n_past(), s.n,
                       static_cast<int64_t>(s.want)});
  for (size_t i = 0; i < batch.size(); ++i)
    for (const model::InputRows& r : batch[i].rows) {
      w.insert(w.end(), {static_cast<int64_t>(i), r.at, r.n});
      row_data_.insert(row_data_.end(), r.data, r.data + r.n * n_embd);
    }
  for (const model::Segment& s : batch) w.insert(w.end(), s.ids, s.ids + s.n);
  w[0] = static_cast<int64_t>(w.size()) - 1;
  cnt_.tokens += static_cast<uint64_t>(n_ids);
  bcast(w, true);
  if (row_data_.empty()) return;
  const auto t0 = Clock::now();
  MPI_Request r;
  MPI_Ibcast(row_data_.data(), as_count(row_data_.size(), "input rows"), MPI_FLOAT, 0, MPI_COMM_WORLD, &r);
  wait(r, false);
  add_time(t0);
}

bool MpiGroup::send_ops(bool asked) {
  const std::vector<int64_t> ops = take_ops();
  std::vector<int64_t> w = {0, static_cast<int64_t>(Op::Cache), asked, static_cast<int64_t>(ops.size())};
  w.insert(w.end(), ops.begin(), ops.end());
  w[0] = static_cast<int64_t>(w.size()) - 1;
  bcast(w, false);
  int ok = 1, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

void MpiGroup::send(Op op) {
  bool pending;
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending = !ops_.empty();
  }
  if (pending) send_ops(false);  // before Stats and Quit: the others' prompt-cache files are complete
  std::vector<int64_t> w = {1, static_cast<int64_t>(op)};
  bcast(w, false);
}

bool MpiGroup::answer(bool ok) {
  int mine = ok, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

void MpiGroup::receive(Message& m) {
  std::vector<int64_t>& w = words_;
  w.assign(kInlineWords, 0);
  MPI_Request r;
  MPI_Ibcast(w.data(), kInlineWords, MPI_INT64_T, 0, MPI_COMM_WORLD, &r);
  wait(r, true);  // waiting for the leader is not communication time
  const size_t total = static_cast<size_t>(w[0]) + 1;
  m.op = static_cast<Op>(w[1]);
  if (m.op != Op::Pass && m.op != Op::Cache) return;
  const bool pass = m.op == Op::Pass;
  if (pass) ++cnt_.messages, cnt_.bytes += kInlineWords * 8;
  if (total > static_cast<size_t>(kInlineWords)) {
    w.resize(total);
    const auto t1 = Clock::now();
    MPI_Ibcast(w.data() + kInlineWords, as_count(total - kInlineWords, "pass"), MPI_INT64_T, 0, MPI_COMM_WORLD, &r);
    wait(r, false);
    if (pass) add_time(t1), cnt_.bytes += (total - kInlineWords) * 8;
  }
  size_t i = 2;
  m.segs.clear(), m.rows.clear(), m.ids.clear(), m.row_data.clear();
  if (!pass) {
    m.asked = w[i++] != 0;
    const int64_t n_ops = w[i++];
    m.ops.assign(w.begin() + static_cast<std::ptrdiff_t>(i), w.begin() + static_cast<std::ptrdiff_t>(i + n_ops));
    return;
  }
  m.f16_rule = w[i++];
  const int64_t n_ops = w[i++], n_seg = w[i++], n_rows = w[i++], n_ids = w[i++], n_values = w[i++];
  m.ops.assign(w.begin() + static_cast<std::ptrdiff_t>(i), w.begin() + static_cast<std::ptrdiff_t>(i + n_ops));
  i += static_cast<size_t>(n_ops);
  for (int64_t k = 0; k < n_seg; ++k, i += 5) m.segs.push_back({w[i], w[i + 1], w[i + 2], w[i + 3], w[i + 4]});
  for (int64_t k = 0; k < n_rows; ++k, i += 3) m.rows.push_back({w[i], w[i + 1], w[i + 2]});
  for (int64_t k = 0; k < n_ids; ++k) m.ids.push_back(static_cast<int32_t>(w[i++]));
  cnt_.tokens += static_cast<uint64_t>(n_ids);
  m.row_data.resize(static_cast<size_t>(n_values));
  if (n_values == 0) return;
  const auto t0 = Clock::now();
  MPI_Ibcast(m.row_data.data(), as_count(m.row_data.size(), "input rows"), MPI_FLOAT, 0, MPI_COMM_WORLD, &r);
  wait(r, false);
  add_time(t0);
  cnt_.bytes += m.row_data.size() * sizeof(float);
}

uint64_t MpiGroup::new_id() {
  std::lock_guard<std::mutex> lk(mu_);
  return next_id_++;
}

void MpiGroup::copied(uint64_t from, uint64_t to) {
  const int64_t v[2] = {static_cast<int64_t>(from), static_cast<int64_t>(to)};
  queue(OpKind::CopyState, v);
}

void MpiGroup::dropped(uint64_t id) {
  const int64_t v[1] = {static_cast<int64_t>(id)};
  queue(OpKind::DropState, v);
}

void MpiGroup::post(std::vector<int64_t> op) { queue(OpKind::Cache, op); }

bool MpiGroup::ask(std::vector<int64_t> op) {
  queue(OpKind::Cache, op);
  return send_ops(true);
}

// ---- slices ----

// In bytes: a part's rows are floats, or blocks of an activation format that no share splits.
void MpiGroup::gather(std::span<const model::Slice> parts, int64_t T) {
  const int N = place_.tp_size, me = place_.tp_rank;
  if (N == 1 || parts.empty() || T <= 0) return;
  size_t total = 0;
  for (int r = 0; r < N; ++r) {
    size_t n = 0;
    for (const model::Slice& p : parts) {
      const int64_t b = share(p.full, p.unit, r), e = share(p.full, p.unit, r + 1);
      K3_ASSERT(b % type_info(p.type).block == 0);
      n += static_cast<size_t>(T) * p.bytes(e - b);
    }
    counts_[r] = as_count(n, "gather");
    displs_[r] = as_count(total, "gather");
    total += n;
  }
  for (const model::Slice& p : parts) K3_ASSERT(p.local == share(p.full, p.unit, me + 1) - share(p.full, p.unit, me));
  const void* send = parts[0].data;
  if (parts.size() > 1) {
    gpack_.resize(counts_[me]);
    uint8_t* o = gpack_.data();
    for (const model::Slice& p : parts) o = std::copy_n(static_cast<const uint8_t*>(p.data), T * p.bytes(p.local), o);
    send = gpack_.data();
  }
  gbuf_.resize(total);
  const auto t0 = Clock::now();
  MPI_Allgatherv(send, counts_[me], MPI_BYTE, gbuf_.data(), counts_.data(), displs_.data(), MPI_BYTE, tp_comm_);
  add_time(t0);
  cnt_.bytes += total - counts_[me];
  for (int r = 0; r < N; ++r) {
    const uint8_t* src = gbuf_.data() + displs_[r];
    for (const model::Slice& p : parts) {
      const int64_t b = share(p.full, p.unit, r), e = share(p.full, p.unit, r + 1);
      const size_t n = p.bytes(e - b), row = p.bytes(p.full), at = p.bytes(b);
      for (int64_t t = 0; t < T; ++t) std::copy_n(src + t * n, n, static_cast<uint8_t*>(p.data) + t * row + at);
      src += T * n;
    }
  }
}

void MpiGroup::gather_lookup(float* x, const int32_t* ids, int64_t T, int64_t H, int64_t V) {
  const int N = place_.tp_size, me = place_.tp_rank;
  if (N == 1) return;
  auto owner = [&](int32_t id) {
    int r = 0;
    while (r + 1 < N && share(V, 1, r + 1) <= id) ++r;
    return r;
  };
  std::fill(counts_.begin(), counts_.end(), 0);
  for (int64_t t = 0; t < T; ++t) counts_[owner(ids[t])] += static_cast<int>(H);
  size_t total = 0;
  for (int r = 0; r < N; ++r) displs_[r] = as_count(total, "embedding"), total += counts_[r];
  pack_.resize(counts_[me]);
  float* o = pack_.data();
  for (int64_t t = 0; t < T; ++t)
    if (owner(ids[t]) == me) o = std::copy_n(x + t * H, H, o);
  buf_.resize(total);
  const auto t0 = Clock::now();
  MPI_Allgatherv(pack_.data(), counts_[me], MPI_FLOAT, buf_.data(), counts_.data(), displs_.data(), MPI_FLOAT,
                 tp_comm_);
  add_time(t0);
  cnt_.bytes += (total - counts_[me]) * sizeof(float);
  std::vector<int>& at = counts_;  // reused as each process's read position
  for (int r = 0; r < N; ++r) at[r] = displs_[r];
  for (int64_t t = 0; t < T; ++t) {
    const int r = owner(ids[t]);
    std::copy_n(buf_.data() + at[r], H, x + t * H);
    at[r] += static_cast<int>(H);
  }
}

void MpiGroup::gather_logits(float* out, int64_t local, int64_t R, int64_t V) {
  const int head_stage = place_.n_stages - 1;
  if (local < 0) {  // not holding the head: the leader receives the last stage's logits
    if (world_rank_ != 0) return;
    const auto t0 = Clock::now();
    MPI_Recv(out, as_count(static_cast<size_t>(R * V), "logits"), MPI_FLOAT, world_of(head_stage, 0), kLogitsTag,
             MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    add_time(t0);
    cnt_.bytes += static_cast<size_t>(R * V) * sizeof(float);
    return;
  }
  const int N = place_.tp_size, me = place_.tp_rank;
  if (N > 1) {
    size_t total = 0;
    for (int r = 0; r < N; ++r) {
      counts_[r] = as_count(static_cast<size_t>(R * (share(V, 1, r + 1) - share(V, 1, r))), "logits");
      displs_[r] = as_count(total, "logits");
      total += counts_[r];
    }
    K3_ASSERT(local == share(V, 1, me + 1) - share(V, 1, me));
    if (me == 0) buf_.resize(total);
    const auto t0 = Clock::now();
    MPI_Gatherv(out, counts_[me], MPI_FLOAT, buf_.data(), counts_.data(), displs_.data(), MPI_FLOAT, 0, tp_comm_);
    add_time(t0);
    if (me != 0) return;
    cnt_.bytes += (total - counts_[me]) * sizeof(float);
    for (int r = 0; r < N; ++r) {
      const int64_t b = share(V, 1, r), n = share(V, 1, r + 1) - b;
      for (int64_t t = 0; t < R; ++t) std::copy_n(buf_.data() + displs_[r] + t * n, n, out + t * V + b);
    }
  }
  if (me == 0 && world_rank_ != 0) {  // the last stage's first process hands them to the leader
    Pending p;
    p.data.assign(out, out + R * V);
    const auto t0 = Clock::now();
    MPI_Isend(p.data.data(), as_count(p.data.size(), "logits"), MPI_FLOAT, 0, kLogitsTag, MPI_COMM_WORLD, &p.req);
    add_time(t0);
    sends_.push_back(std::move(p));
  }
}

// ---- pipeline stages ----

void MpiGroup::recv_stream(float* h, model::Bank& bank, int64_t T, int64_t H) {
  const int src = world_of(place_.stage - 1, place_.tp_rank);
  const auto t0 = Clock::now();
  MPI_Status st;
  MPI_Probe(src, kStreamTag, MPI_COMM_WORLD, &st);
  int n = 0;
  MPI_Get_count(&st, MPI_FLOAT, &n);
  buf_.resize(static_cast<size_t>(n));
  MPI_Recv(buf_.data(), n, MPI_FLOAT, src, kStreamTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  add_time(t0);
  cnt_.bytes += static_cast<size_t>(n) * sizeof(float);
  const int64_t rows = T * H;
  K3_ASSERT(n % rows == 0 && n >= rows);
  std::copy_n(buf_.data(), rows, h);
  for (int64_t j = 1; j < n / rows; ++j) std::copy_n(buf_.data() + j * rows, rows, bank.add());
}

void MpiGroup::send_stream(const float* h, const model::Bank& bank, int64_t T, int64_t H) {
  const int dst = world_of(place_.stage + 1, place_.tp_rank);
  const int64_t rows = T * H;
  Pending p;
  p.data.resize(static_cast<size_t>(rows) * (1 + bank.n));
  std::copy_n(h, rows, p.data.data());
  for (size_t j = 0; j < bank.n; ++j) std::copy_n(bank.entries[j].data(), rows, p.data.data() + (1 + j) * rows);
  const auto t0 = Clock::now();
  MPI_Isend(p.data.data(), as_count(p.data.size(), "stream"), MPI_FLOAT, dst, kStreamTag, MPI_COMM_WORLD, &p.req);
  add_time(t0);
  sends_.push_back(std::move(p));
}

void MpiGroup::end_pass() {
  if (sends_.empty()) return;
  const auto t0 = Clock::now();
  for (Pending& p : sends_) MPI_Wait(&p.req, MPI_STATUS_IGNORE);
  cnt_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  sends_.clear();
}

bool MpiGroup::any_streams(bool here) {
  if (any_streams_ < 0) {  // once, like the start-up checks: not counted as a pass's exchange
    int mine = here ? 1 : 0;
    MPI_Allreduce(&mine, &any_streams_, 1, MPI_INT, MPI_MAX, tp_comm_);
  }
  return any_streams_ != 0;
}

void MpiGroup::abort(const char* what) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::fprintf(stderr, "k3: rank %d of %d (host %s) failed: %s\n", world_rank_, world_size_, host, what);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

// ---- start-up checks and figures ----

std::vector<uint64_t> MpiGroup::gather_u64(const std::vector<uint64_t>& mine) {
  std::vector<uint64_t> all(world_rank_ == 0 ? mine.size() * world_size_ : 0);
  MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_UINT64_T, all.data(), static_cast<int>(mine.size()),
             MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return all;
}

bool MpiGroup::same(const std::string& value, std::vector<std::string>* all) {
  constexpr size_t kLen = 256;
  std::vector<char> mine(kLen, 0), every(kLen * world_size_);
  std::memcpy(mine.data(), value.data(), std::min(value.size(), kLen - 1));
  MPI_Allgather(mine.data(), static_cast<int>(kLen), MPI_CHAR, every.data(), static_cast<int>(kLen), MPI_CHAR,
                MPI_COMM_WORLD);
  bool ok = true;
  all->clear();
  for (int r = 0; r < world_size_; ++r) {
    all->emplace_back(every.data() + r * kLen);
    ok = ok && all->back() == all->front();
  }
  return ok;
}

}  // namespace k3::multinode
