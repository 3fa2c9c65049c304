#include "transport/auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace gcagent::transport {
namespace {

std::span<const std::byte> bytesOf(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::string hex(const Digest& d) {
  std::string out;
  char buf[3];
  for (std::byte b : d) {
    std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned>(b));
    out += buf;
  }
  return out;
}

// RFC 4231, test cases 1, 2, 3, 4 and 6 (7 is a longer message under the same long key).
TEST(HmacSha256, MatchesRfc4231Vectors) {
  EXPECT_EQ(hex(hmacSha256(bytesOf(std::string(20, '\x0b')), bytesOf("Hi There"))),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(hmacSha256(bytesOf("Jefe"), bytesOf("what do ya want for nothing?"))),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex(hmacSha256(bytesOf(std::string(20, '\xaa')), bytesOf(std::string(50, '\xdd')))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4 += static_cast<char>(i);
  EXPECT_EQ(hex(hmacSha256(bytesOf(key4), bytesOf(std::string(50, '\xcd')))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  EXPECT_EQ(hex(hmacSha256(bytesOf(std::string(131, '\xaa')),
                           bytesOf("Test Using Larger Than Block-Size Key - Hash Key First"))),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacSha256, DigestsCompareByEveryByte) {
  Digest a = hmacSha256(bytesOf("k"), bytesOf("m"));
  Digest b = a;
  EXPECT_TRUE(digestsEqual(a, b));
  b[31] ^= std::byte{1};
  EXPECT_FALSE(digestsEqual(a, b));
  b = a;
  b[0] ^= std::byte{0x80};
  EXPECT_FALSE(digestsEqual(a, b));
}

TEST(HandshakeProof, BindsTokenRoleRanksAndNonces) {
  Nonce c{}, a{};
  ASSERT_TRUE(randomBytes(c).ok());
  ASSERT_TRUE(randomBytes(a).ok());
  EXPECT_NE(c, a);  // 128 random bits twice
  const Digest base = handshakeProof("secret", Role::kAcceptor, 0, 1, c, a);
  EXPECT_TRUE(digestsEqual(base, handshakeProof("secret", Role::kAcceptor, 0, 1, c, a)));
  EXPECT_FALSE(digestsEqual(base, handshakeProof("secret", Role::kConnector, 0, 1, c, a)));
  EXPECT_FALSE(digestsEqual(base, handshakeProof("secreT", Role::kAcceptor, 0, 1, c, a)));
  EXPECT_FALSE(digestsEqual(base, handshakeProof("", Role::kAcceptor, 0, 1, c, a)));
  EXPECT_FALSE(digestsEqual(base, handshakeProof("secret", Role::kAcceptor, 0, 2, c, a)));
  EXPECT_FALSE(digestsEqual(base, handshakeProof("secret", Role::kAcceptor, 0, 1, a, c)));
}

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gcagent-token-XXXXXX";
    const int fd = ::mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    ::close(fd);
    path_ = tmpl;
  }
  void TearDown() override { ::unlink(path_.c_str()); }
  void write(const std::string& text, mode_t mode) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << text;
    ASSERT_EQ(::chmod(path_.c_str(), mode), 0);
  }
  std::string path_;
};

TEST_F(TokenFileTest, ReadsThePrivateFileWithoutTrailingNewline) {
  write("s3cr3t-token\n", 0600);
  auto token = readTokenFile(path_);
  ASSERT_TRUE(token.ok()) << token.status().toString();
  EXPECT_EQ(token.value(), "s3cr3t-token");
  write("read-only", 0400);
  EXPECT_EQ(readTokenFile(path_).value(), "read-only");
}

TEST_F(TokenFileTest, RefusesAFileOthersOrTheGroupCanRead) {
  write("s3cr3t-token\n", 0644);
  auto token = readTokenFile(path_);
  ASSERT_FALSE(token.ok());
  EXPECT_EQ(token.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(token.status().message().find("'" + path_ + "' has mode 0644"), std::string::npos)
      << token.status().message();
  EXPECT_EQ(token.status().message().find("s3cr3t"), std::string::npos);
  write("s3cr3t-token\n", 0640);
  EXPECT_NE(readTokenFile(path_).status().message().find("has mode 0640"), std::string::npos);
}

TEST_F(TokenFileTest, RefusesAFileOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another user needs root";
  write("s3cr3t-token\n", 0600);
  ASSERT_EQ(::chown(path_.c_str(), 65534, static_cast<gid_t>(-1)), 0);
  auto token = readTokenFile(path_);
  ASSERT_FALSE(token.ok());
  EXPECT_EQ(token.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(token.status().message(), "security.token_file '" + path_ +
                                          "' belongs to uid 65534, not to this agent's uid 0 or root: chown it to the agent's user");
}

TEST_F(TokenFileTest, RefusesAnEmptyOrMissingFile) {
  write("\n", 0600);
  EXPECT_NE(readTokenFile(path_).status().message().find("holds no token"), std::string::npos);
  auto missing = readTokenFile(path_ + ".absent");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("No such file"), std::string::npos);
}

}  // namespace
}  // namespace gcagent::transport
