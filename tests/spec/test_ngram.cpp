// n-gram drafts (dspark.md §11): the examples of the spec, incremental pushes, the draft limit.
#include <gtest/gtest.h>

#include "spec/ngram.h"

using k3::spec::NgramIndex;

namespace {

std::vector<int32_t> drafts(const std::vector<int32_t>& x, int64_t max = 16) {
  NgramIndex g;
  g.push(x);
  std::vector<int32_t> out;
  g.draft(max, out);
  return out;
}

TEST(Ngram, SpecExamples) {
  EXPECT_EQ(drafts({1, 2, 3, 9, 9, 1, 2, 3}), (std::vector<int32_t>{9, 9, 1, 2, 3}));
  EXPECT_EQ(drafts({5, 1, 2, 7, 8, 1, 2}), (std::vector<int32_t>{7, 8, 1, 2}));
  EXPECT_EQ(drafts({7, 7, 7, 7}), (std::vector<int32_t>{7}));
  EXPECT_TRUE(drafts({1, 2, 3}).empty());
}

TEST(Ngram, MostRecentOccurrenceAndLimit) {
  // (4, 5) occurs at 0 and at 3: the later one's continuation
  EXPECT_EQ(drafts({4, 5, 6, 4, 5, 8, 1, 4, 5}), (std::vector<int32_t>{8, 1, 4, 5}));
  EXPECT_EQ(drafts({1, 2, 3, 9, 9, 1, 2, 3}, 2), (std::vector<int32_t>{9, 9}));
  EXPECT_TRUE(drafts({1, 2, 3, 1, 2, 3}, 0).empty());
}

TEST(Ngram, IncrementalEqualsWhole) {
  const std::vector<int32_t> x = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7, 9, 5};
  NgramIndex g;
  for (size_t i = 0; i < x.size(); ++i) {
    g.push(x[i]);
    std::vector<int32_t> a;
    g.draft(4, a);
    EXPECT_EQ(a, drafts({x.begin(), x.begin() + i + 1}, 4)) << "after " << i + 1;
  }
}

}  // namespace
