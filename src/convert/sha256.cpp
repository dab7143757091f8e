#include "convert/sha256.h"

#include <openssl/evp.h>

#include "common/error.h"

namespace k3::convert {

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
  static const char* hexd = "0123456789abcdef";
  std::string s(2 * len, '0');
  for (unsigned i = 0; i < len; ++i) {
    s[2 * i] = hexd[md[i] >> 4];
    s[2 * i + 1] = hexd[md[i] & 15];
  }
  return s;
}

std::string sha256_hex(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.hex();
}

}  // namespace k3::convert
