#include "transport/auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/str_cat.h"

namespace gcagent::transport {

Digest hmacSha256(std::span<const std::byte> key, std::span<const std::byte> message) {
  Digest out{};
  unsigned length = 0;
  // HMAC() with a null key pointer picks a default key: pass a valid pointer for empty keys.
  static const unsigned char kEmpty[1] = {0};
  HMAC(EVP_sha256(), key.empty() ? kEmpty : reinterpret_cast<const unsigned char*>(key.data()),
       static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       reinterpret_cast<unsigned char*>(out.data()), &length);
  return out;
}

bool digestsEqual(const Digest& a, const Digest& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

Status randomBytes(std::span<std::byte> out) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::getrandom(out.data() + done, out.size() - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::unavailable(strCat("getrandom: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return {};
}

Digest handshakeProof(std::string_view token, Role role, uint32_t connector, uint32_t acceptor,
                      const Nonce& connector_nonce, const Nonce& acceptor_nonce) {
  static constexpr char kLabel[] = "gcagent-peer-auth-v1";
  std::vector<std::byte> message(sizeof kLabel - 1 + 1 + 8 + 2 * sizeof(Nonce));
  std::byte* p = message.data();
  std::memcpy(p, kLabel, sizeof kLabel - 1);
  p += sizeof kLabel - 1;
  *p++ = static_cast<std::byte>(role);
  for (uint32_t v : {connector, acceptor})
    for (int i = 0; i < 4; ++i) *p++ = static_cast<std::byte>((v >> (8 * i)) & 0xff);
  std::memcpy(p, connector_nonce.data(), connector_nonce.size());
  p += connector_nonce.size();
  std::memcpy(p, acceptor_nonce.data(), acceptor_nonce.size());
  return hmacSha256(std::as_bytes(std::span(token.data(), token.size())), message);
}

Result<std::string> readTokenFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Status::notFound(strCat("security.token_file '", path, "': ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::unavailable(strCat("security.token_file '", path, "': ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::invalidArgument(strCat("security.token_file '", path, "' is not a regular file"));
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {  // another user could rewrite the cluster's secret (root can anyway)
    ::close(fd);
    return Status::failedPrecondition(strCat("security.token_file '", path, "' belongs to uid ", st.st_uid,
                                             ", not to this agent's uid ", ::geteuid(), " or root: chown it to the agent's user"));
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::failedPrecondition(strCat("security.token_file '", path, "' has mode ", mode,
                                             ": its group or others may access it; make it 0600 (chmod 600)"));
  }
  std::string token;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Status::unavailable(strCat("security.token_file '", path, "': ", std::strerror(err)));
    }
    if (n == 0) break;
    token.append(buffer, static_cast<size_t>(n));
    if (token.size() > (1u << 16)) {
      ::close(fd);
      return Status::invalidArgument(strCat("security.token_file '", path, "' is larger than 64 KiB"));
    }
  }
  ::close(fd);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ' || token.back() == '\t'))
    token.pop_back();
  if (token.empty()) return Status::invalidArgument(strCat("security.token_file '", path, "' holds no token"));
  return token;
}

}  // namespace gcagent::transport
