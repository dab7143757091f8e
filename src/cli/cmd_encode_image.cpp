// k3 encode-image: one image through an mmproj's tower and projector (parity work and scripts).
#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_cli.h"
#include "common/error.h"
#include <cerrno>
#include <cstring>
#include "vision/vision.h"

using namespace k3;

namespace {

void write_raw(const std::string& path, const void* data, size_t n) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("%s: cannot create: %s", tmp.c_str(), std::strerror(errno));
  const bool ok = std::fwrite(data, 1, n, f) == n;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    fail("%s: write failed", tmp.c_str());
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("%s: cannot rename to %s", tmp.c_str(), path.c_str());
}

}  // namespace

static int cmd_encode_image(int argc, char** argv) {
  CLI::App app{"Run one image through the vision tower and projector of an mmproj file and print "
               "{\"width\",\"height\",\"resized\",\"grid\",\"n_tokens\",\"n_embd\"} as one JSON line.",
               "k3 encode-image"};
  std::string mmproj, image, out, pixels;
  vision::VisionOptions vo;
  vo.threads = 0;
  app.add_option("--mmproj", mmproj, "mmproj GGUF (k3 convert, make-tiny --vision)")->required();
  app.add_option("--image", image, "PNG or JPEG file")->required();
  app.add_option("--out", out, "write the n_tokens x n_embd rows as raw little-endian float32");
  app.add_option("--dump-pixels", pixels, "write the resized RGB bytes (before padding), raw, row-major");
  std::string trace;
  app.add_option("--trace", trace,
                 "write every named intermediate (patch_embd, pos_embd, attn-L, blk_out-L, post_ln, merged, rows) "
                 "to DIR/NAME.f32 as raw float32 rows, for parity work");
  app.add_option("-t,--threads", vo.threads, "threads (default: all cores)");
  app.add_option("--image-max-pixels", vo.max_pixels, "refuse images with more pixels (checked from the header)")
      ->capture_default_str();
  app.add_option("--image-max-tokens", vo.max_tokens, "largest number of rows per image (0: the mmproj's patch limit)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  vo.threads = cli::pick_threads(vo.threads);
  vision::Vision v(mmproj, vo);
  const std::vector<uint8_t> bytes = vision::read_image_file(image);
  vision::Image resized;
  const auto t0 = std::chrono::steady_clock::now();
  vision::Dump dump;
  if (!trace.empty()) {
    std::filesystem::create_directories(trace);
    dump = [&](const char* name, int layer, const float* data, int64_t n_rows, int64_t cols) {
      const std::string file = std::string(name) + (layer >= 0 ? "-" + std::to_string(layer) : "") + ".f32";
      write_raw((std::filesystem::path(trace) / file).string(), data, static_cast<size_t>(n_rows * cols) * sizeof(float));
    };
  }
  auto rows = v.encode(bytes, "", image, &resized, dump);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!out.empty()) write_raw(out, rows->rows.data(), rows->rows.size() * sizeof(float));
  if (!pixels.empty()) write_raw(pixels, resized.rgb.data(), resized.rgb.size());
  const vision::Geometry& g = rows->geometry;
  nlohmann::json j = {{"width", g.width},       {"height", g.height},     {"resized", {g.rw, g.rh}},
                      {"grid", {g.grid_h, g.grid_w}}, {"n_tokens", rows->n_tokens}, {"n_embd", rows->n_embd},
                      {"hash", rows->hash},     {"ms", ms},               {"threads", vo.threads}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

K3_COMMAND("encode-image", "run an image through an mmproj vision tower (rows as JSON/raw floats)", cmd_encode_image);
