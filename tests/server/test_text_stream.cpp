// Detokenizer (markers kept for the parser, other special tokens dropped) and stop strings
// (same result however the text is split).
#include <gtest/gtest.h>

#include "helpers.h"
#include "server/text_stream.h"

using namespace k3;
using namespace k3::server;

static std::string run_stops(const std::vector<std::string>& stops, const std::vector<std::string>& pieces,
                             bool* hit) {
  StopMatcher sm(stops);
  std::string out;
  for (const auto& p : pieces) out += sm.push(p);
  out += sm.flush();
  *hit = sm.hit();
  return out;
}

TEST(StopMatcher, EverySplitGivesTheSameResult) {
  const std::string text = "Hello wor<ld> and more STOP here ST and <end>";
  struct Case {
    std::vector<std::string> stops;
    std::string expect;
    bool hit;
  } cases[] = {
      {{"STOP"}, "Hello wor<ld> and more ", true},
      {{"<end>"}, "Hello wor<ld> and more STOP here ST and ", true},
      {{"nothing", "STX"}, text, false},
      {{"<end>", "wor"}, "Hello ", true},  // earliest occurrence wins
      {{"more STOP", "STOP"}, "Hello wor<ld> and ", true},
      {{"d> and more STOP here ST and <end>X"}, text, false},  // prefix held back, then released
  };
  for (const auto& c : cases) {
    for (size_t a = 0; a <= text.size(); ++a)
      for (size_t b = a; b <= text.size(); b += 3) {
        bool hit = false;
        const std::string out =
            run_stops(c.stops, {text.substr(0, a), text.substr(a, b - a), text.substr(b)}, &hit);
        ASSERT_EQ(out, c.expect) << "split " << a << "," << b << " stop " << c.stops[0];
        ASSERT_EQ(hit, c.hit);
      }
    // One byte at a time.
    std::vector<std::string> bytes;
    for (char ch : text) bytes.emplace_back(1, ch);
    bool hit = false;
    EXPECT_EQ(run_stops(c.stops, bytes, &hit), c.expect);
  }
}

TEST(StopMatcher, HoldsBackOnlyPossiblePrefixes) {
  StopMatcher sm({"</s>"});
  EXPECT_EQ(sm.push("abc<"), "abc");
  EXPECT_EQ(sm.push("/x"), "</x");
  EXPECT_EQ(sm.push("</"), "");
  EXPECT_EQ(sm.push("s>tail"), "");
  EXPECT_TRUE(sm.hit());
  EXPECT_EQ(sm.matched(), "</s>");
  EXPECT_EQ(sm.push("more"), "");
  EXPECT_EQ(sm.flush(), "");
}

TEST(StopMatcher, NoStopsPassesThrough) {
  StopMatcher sm({});
  EXPECT_EQ(sm.push("a<b"), "a<b");
  EXPECT_FALSE(sm.hit());
}

TEST(Detokenizer, MarkersKeptOtherSpecialsDropped) {
  const auto& m = test::tiny_model();
  const auto ids = m.tok->encode("Hi<|open|>tools<|sep|>[BOS]x<|media_pad|>é<|end_of_msg|>", true);
  Detokenizer keep(*m.tok, true), plain(*m.tok, false);
  std::string a, b;
  for (int32_t id : ids) a += keep.push(id), b += plain.push(id);
  a += keep.flush();
  b += plain.flush();
  EXPECT_EQ(a, "Hi<|open|>tools<|sep|>xé<|end_of_msg|>");
  EXPECT_EQ(b, "Hitoolsxé");
}

TEST(Detokenizer, SplitUtf8HeldBack) {
  const auto& m = test::tiny_model();
  const auto ids = m.tok->encode("日本語", false);
  ASSERT_GT(ids.size(), 3u);  // byte-level vocabulary: several tokens per character
  Detokenizer d(*m.tok, true);
  std::string out;
  for (int32_t id : ids) {
    std::string piece = d.push(id);
    // Every piece handed out is whole UTF-8 characters.
    if (!piece.empty()) {
      EXPECT_NE(static_cast<unsigned char>(piece[0]) & 0xC0, 0x80);
    }
    out += piece;
  }
  out += d.flush();
  EXPECT_EQ(out, "日本語");
}
