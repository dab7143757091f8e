#include "spec/speculator.h"

#include <algorithm>

#include "common/error.h"

namespace k3::spec {

using Clock = std::chrono::steady_clock;

namespace {
constexpr double kEma = 0.2;          // weight of a new measurement
constexpr double kPriorAccept = 0.5;  // P(draft accepted) before any pass
constexpr double kPriorSlope = 0.25;  // verify cost per extra row, relative to a plain step, before any pass
constexpr int64_t kProbeEvery = 16;   // plain steps in a row before drafting is tried again
constexpr int kNgramCap = 8;          // most n-gram drafts a step without --draft-max
}  // namespace

const char* spec_type_name(SpecType t) {
  switch (t) {
    case SpecType::None: return "none";
    case SpecType::Ngram: return "ngram";
    case SpecType::Dspark: return "dspark";
  }
  return "?";
}

void SpecStats::add(const SpecStats& o) {
  passes += o.passes, steps += o.steps, drafted += o.drafted, accepted += o.accepted, emitted += o.emitted;
  draft_s += o.draft_s;
  if (accepted_hist.size() < o.accepted_hist.size()) accepted_hist.resize(o.accepted_hist.size());
  for (size_t i = 0; i < o.accepted_hist.size(); ++i) accepted_hist[i] += o.accepted_hist[i];
}

Drafting::Drafting(const model::Model& target, const DraftModel* draft, SpecOptions o, ThreadPool& pool)
    : target_(target), draft_(draft), o_(o), pool_(pool) {
  if (o_.type == SpecType::Dspark && !draft_) fail("--spec-type dspark needs a draft model (-md FILE)");
  if (o_.draft_max < 0 || o_.draft_min < 0) fail("--draft-max and --draft-min must be >= 0");
  if (!enabled()) return;
  if (target.group()) fail("speculative decoding is not supported under mpirun yet");
  if (draft_) taps_ = std::make_unique<Taps>(draft_->taps(), target.hparams().n_layer, target.hparams().n_embd);
  const int limit = draft_ ? static_cast<int>(draft_->params().block_size) : kNgramCap;
  cap_ = o_.draft_max > 0 ? o_.draft_max : limit;
  if (draft_ && cap_ > limit)
    fail("--draft-max %d exceeds the draft's block size %d", o_.draft_max, limit);
  cost_.assign(cap_ + 2, 0.0);
}

void Drafting::timed(int64_t rows, double seconds) {
  if (rows < 1 || rows >= static_cast<int64_t>(cost_.size())) return;
  double& c = cost_[rows];
  c = c > 0 ? (1 - kEma) * c + kEma * seconds : seconds;
}

double Drafting::relative_cost(int64_t b) const {
  if (b <= 1) return 1.0;
  if (cost_[1] <= 0) return 1.0 + kPriorSlope * static_cast<double>(b - 1);
  if (b < static_cast<int64_t>(cost_.size()) && cost_[b] > 0) return cost_[b] / cost_[1];
  // extrapolate from the widest pass measured so far
  for (int64_t m = static_cast<int64_t>(cost_.size()) - 1; m >= 2; --m)
    if (cost_[m] > 0) return 1.0 + (cost_[m] / cost_[1] - 1.0) / static_cast<double>(m - 1) * static_cast<double>(b - 1);
  return 1.0 + kPriorSlope * static_cast<double>(b - 1);
}

Speculator::Speculator(Drafting& d, model::State& st) : d_(d), state_(st), accept_(d.cap_, kPriorAccept) {
  if (d_.draft_ && st.side_width() != d_.draft_->side_width()) st.set_side_width(d_.draft_->side_width());
  st_.accepted_hist.assign(d.cap_ + 1, 0);
}

void Speculator::prompt(std::span<const int32_t> ids, const float* taps) {
  ngram_.push(ids);
  if (d_.draft_ && taps && state_.side_rows() + static_cast<int64_t>(ids.size()) == state_.n_past()) {
    model::Ctx ctx{d_.pool_};
    d_.draft_->add_context(ctx, taps, static_cast<int64_t>(ids.size()), state_.side_rows(), state_.side);
  }
}

void Speculator::first(int32_t id) { ngram_.push(id); }

int64_t Speculator::choose(int64_t budget) const {
  const int64_t cap = std::min<int64_t>(d_.cap_, budget - 1);
  if (cap <= 0) return 0;
  if (d_.o_.draft_max > 0) return cap;
  // §13: the number of drafts with the least expected time per emitted token, from the measured
  // verify cost by rows and this sequence's acceptance by draft position
  const double draft = dspark_ ? d_.draft_cost_ : 0.0;
  int64_t best = 0;
  double best_cost = 1.0, tau = 1.0, reach = 1.0;
  for (int64_t n = 1; n <= cap; ++n) {
    reach *= accept_[n - 1];
    tau += reach;
    const double c = (d_.relative_cost(n + 1) + draft) / tau;
    if (c < best_cost) best = n, best_cost = c;
  }
  if (best == 0 && plain_run_ >= kProbeEvery) best = 1;  // acceptance may have come back
  return best;
}

const std::vector<int32_t>& Speculator::plan(int64_t budget) {
  K3_ASSERT(ngram_.size() > 0);
  dspark_ = d_.draft_ && state_.side_rows() == state_.n_past();
  const int64_t n = choose(budget);
  drafts_.clear();
  if (n > 0 && dspark_ && !d_.o_.source) {
    const auto t0 = Clock::now();
    model::Ctx ctx{d_.pool_};
    d_.draft_->propose(ctx, state_.side, ngram_.last(), n, drafts_);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    st_.draft_s += s;
    if (d_.cost_[1] > 0) d_.draft_cost_ = d_.draft_cost_ > 0 ? (1 - kEma) * d_.draft_cost_ + kEma * s / d_.cost_[1] : s / d_.cost_[1];
  } else if (n > 0 && d_.o_.source) {
    d_.o_.source(ngram_.tokens(), n, drafts_);
    if (static_cast<int64_t>(drafts_.size()) > n) drafts_.resize(n);
  } else if (n > 0) {
    ngram_.draft(n, drafts_);
  }
  if (static_cast<int64_t>(drafts_.size()) < std::max(1, d_.o_.draft_min)) drafts_.clear();
  ids_.assign(1, ngram_.last());
  ids_.insert(ids_.end(), drafts_.begin(), drafts_.end());
  state_.keep_rows(ids_.size() > 1 ? static_cast<int64_t>(ids_.size()) : 0, d_.o_.keep);
  return ids_;
}

const std::vector<int32_t>& Speculator::verify(const float* logits, model::Sampler& sampler) {
  const int32_t V = d_.target_.n_vocab();
  const int64_t n_d = drafts();
  cand_.clear();
  for (m_ = 0; m_ < n_d; ++m_) {
    bool ok = false;
    cand_.push_back(sampler.verify(logits + m_ * V, V, ids_[m_ + 1], &ok));
    if (!ok) return cand_;
  }
  cand_.push_back(sampler.sample(logits + n_d * V, V));
  return cand_;
}

const std::vector<int32_t>& Speculator::verify_forced(std::span<const int32_t> next) {
  const int64_t n_d = drafts();
  K3_ASSERT(static_cast<int64_t>(next.size()) > n_d);
  cand_.clear();
  for (m_ = 0; m_ < n_d; ++m_) {
    cand_.push_back(next[m_]);
    if (next[m_] != ids_[m_ + 1]) return cand_;
  }
  cand_.push_back(next[n_d]);
  return cand_;
}

void Speculator::commit_plain(int32_t id, const float* taps) {
  K3_ASSERT(ids_.size() == 1);
  cand_.assign(1, id);
  m_ = 0;
  commit(1, taps);
}

void Speculator::rebuilt(const float* taps) {
  if (d_.draft_ && taps && state_.n_past() > 0) {
    state_.side.clear();
    model::Ctx ctx{d_.pool_};
    d_.draft_->add_context(ctx, taps, state_.n_past(), 0, state_.side);
  }
  state_.keep_rows(ids_.size() > 1 ? static_cast<int64_t>(ids_.size()) : 0, d_.o_.keep);
}

void Speculator::commit(int64_t r, const float* taps) {
  const int64_t rows = static_cast<int64_t>(ids_.size()), n_d = rows - 1;
  K3_ASSERT(r >= 1 && r <= static_cast<int64_t>(cand_.size()));
  const int64_t p = state_.n_past() - rows;
  if (r < rows) state_.rewind(p + r, d_.pool_);
  if (dspark_ && taps) {
    model::Ctx ctx{d_.pool_};
    d_.draft_->add_context(ctx, taps, r, p, state_.side);
  }
  ngram_.push(std::span<const int32_t>(cand_.data(), static_cast<size_t>(r)));
  ++st_.steps;
  st_.emitted += r;
  if (n_d == 0) {
    ++plain_run_;
    return;
  }
  plain_run_ = 0;
  ++st_.passes;
  st_.drafted += n_d;
  st_.accepted += m_;
  ++st_.accepted_hist[m_];
  for (int64_t j = 0; j <= std::min(m_, n_d - 1); ++j) accept_[j] = (1 - kEma) * accept_[j] + kEma * (j < m_ ? 1.0 : 0.0);
}

}  // namespace k3::spec
