#include "convert/digest.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include "common/error.h"

namespace k3::convert {

namespace {
std::string to_hex(const unsigned char* md, size_t len) {
  static const char* hexd = "0123456789abcdef";
  std::string s(2 * len, '0');
  for (size_t i = 0; i < len; ++i) {
    s[2 * i] = hexd[md[i] >> 4];
    s[2 * i + 1] = hexd[md[i] & 15];
  }
  return s;
}
}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1)
    fail("OpenSSL: cannot initialise SHA-256");
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(const void* data, size_t n) {
  if (n && EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n) != 1) fail("OpenSSL: SHA-256 update failed");
}

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  auto* c = static_cast<EVP_MD_CTX*>(ctx_);
  if (EVP_DigestFinal_ex(c, md, &len) != 1 || EVP_DigestInit_ex(c, EVP_sha256(), nullptr) != 1)
    fail("OpenSSL: SHA-256 final failed");
  return to_hex(md, len);
}

Xxh3::Xxh3() : state_(XXH3_createState()) {
  if (!state_ || XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_)) != XXH_OK) fail("cannot initialise XXH3");
}

Xxh3::~Xxh3() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Xxh3::update(const void* data, size_t n) {
  if (n && XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, n) != XXH_OK) fail("XXH3 update failed");
}

std::string Xxh3::hex() {
  auto* st = static_cast<XXH3_state_t*>(state_);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
  XXH3_128bits_reset(st);
  return to_hex(c.digest, sizeof c.digest);
}

std::string sha256_hex(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.hex();
}

namespace {
template <class H>
std::string digest_range(SeqReader& in, uint64_t offset, uint64_t n, const std::function<void(uint64_t)>& on_bytes) {
  H h;
  in.read(offset, n, [&](const uint8_t* p, size_t k) {
    h.update(p, k);
    if (on_bytes) on_bytes(k);
  });
  return h.hex();
}
}  // namespace

std::string digest_file_range(Digest kind, SeqReader& in, uint64_t offset, uint64_t n,
                              const std::function<void(uint64_t)>& on_bytes) {
  return kind == Digest::Sha256 ? digest_range<Sha256>(in, offset, n, on_bytes)
                                : digest_range<Xxh3>(in, offset, n, on_bytes);
}

}  // namespace k3::convert
