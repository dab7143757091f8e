#include "vision/vision.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "common/base64.h"

namespace k3::vision {

Vision::Vision(const std::string& mmproj_path, const VisionOptions& o)
    : m_(VisionModel::load(mmproj_path)),
      o_(o),
      pool_(std::make_unique<ThreadPool>(std::max(1, o.threads))),
      enc_(*m_) {}

void Vision::check_text_width(int64_t n_embd, const std::string& model_path) const {
  if (m_->hparams().n_proj != n_embd)
    fail("%s: the projector gives rows of %u values, but the text model %s has embedding_length %lld; the mmproj "
         "belongs to another model",
         m_->path().c_str(), m_->hparams().n_proj, model_path.c_str(), static_cast<long long>(n_embd));
}

std::shared_ptr<const ImageRows> Vision::encode(std::span<const uint8_t> bytes, std::string_view media_type,
                                                const std::string& name, Image* resized, const Dump& dump) {
  Image img = decode_image(bytes, media_type, name, o_.max_pixels);
  std::lock_guard<std::mutex> lk(mu_);
  EncodeOptions eo;
  eo.max_tokens = o_.max_tokens;
  eo.resized = resized;
  eo.dump = dump;
  return std::make_shared<const ImageRows>(enc_.encode(img, *pool_, eo));
}

std::vector<uint8_t> read_image_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ImageError("image '" + path + "': cannot open: " + std::strerror(errno));
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw ImageError("image '" + path + "': read error");
  return b;
}

namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

DataUrl parse_data_url(std::string_view url, const std::string& name) {
  auto bad = [&](const std::string& why) -> DataUrl { throw ImageError("image '" + name + "': " + why); };
  const std::string head = lower(url.substr(0, std::min<size_t>(url.size(), 8)));
  if (head.starts_with("http://") || head.starts_with("https://"))
    return bad("remote image URLs are not supported (the server fetches nothing); send the image inline as a data "
               "URL, data:image/png;base64,...");
  if (!head.starts_with("data:")) return bad("not a data URL (expected data:image/png;base64,... or data:image/jpeg;base64,...)");
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) return bad("malformed data URL (no ',')");
  const std::string meta = lower(url.substr(5, comma - 5));
  if (!meta.ends_with(";base64")) return bad("the data URL is not base64-encoded (expected ';base64,')");
  DataUrl d;
  d.media_type = meta.substr(0, meta.find(';'));
  if (d.media_type != "image/png" && d.media_type != "image/jpeg" && d.media_type != "image/jpg")
    return bad("media type '" + d.media_type + "' is not supported (image/png and image/jpeg are)");
  const std::string_view data = url.substr(comma + 1);
  d.bytes.reserve(data.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    const char c = data[i];
    if (c == '=') {
      ++pad;
      continue;
    }
    const int v = base64_value(c);
    if (v < 0 || pad > 0)
      return bad(strprintf("broken base64 in the data URL: %s at offset %zu", pad ? "data after '=' padding" : "invalid character", i));
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      d.bytes.push_back(static_cast<uint8_t>(acc >> bits));
    }
  }
  const size_t n = data.size() - pad;
  if (n % 4 == 1 || pad > 2 || (pad > 0 && (n + pad) % 4 != 0))
    return bad("broken base64 in the data URL: its length does not fit the encoding");
  return d;
}

}  // namespace k3::vision
