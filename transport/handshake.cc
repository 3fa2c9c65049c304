#include "transport/handshake.h"

#include <cstring>

#include "common/byte_io.h"
#include "common/str_cat.h"

namespace gcagent::transport {
namespace {

constexpr uint32_t kMagic = 0x48414347;  // "GCAH"
constexpr uint8_t kVersion = 1;
constexpr size_t kMaxRefusalText = 512;

Step refuse(Refusal kind, Status why, bool tell_peer = true) {
  Step step;
  if (tell_peer) {
    std::string_view text = why.message();
    text = text.substr(0, kMaxRefusalText);
    step.reply = encodeFrame(FrameType::kRefusal, std::as_bytes(std::span(text.data(), text.size())));
  }
  step.refused = Refused{kind, std::move(why)};
  return step;
}

Step malformed(std::string_view what) { return refuse(Refusal::kMalformed, Status::invalidArgument(strCat("handshake: ", what))); }

// A refusal the peer sent us: its text, made printable and short.
Step refusedByPeer(Rank peer, std::span<const std::byte> body) {
  std::string text;
  for (std::byte b : body.first(std::min(body.size(), kMaxRefusalText))) {
    const char c = static_cast<char>(b);
    text += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return refuse(Refusal::kUnauthenticated,
                Status::unavailable(strCat("rank ", peer, " refused the link: ", text)), /*tell_peer=*/false);
}

uint64_t linkKey(std::string_view token, Role role, Rank connector, Rank acceptor, const Nonce& cn, const Nonce& an) {
  const Digest d = handshakeProof(token, role, connector, acceptor, cn, an);
  uint64_t key;
  std::memcpy(&key, d.data(), sizeof key);
  return key;
}

LinkKeys linkKeys(std::string_view token, Rank connector, Rank acceptor, const Nonce& cn, const Nonce& an) {
  return {linkKey(token, Role::kKeyToAcceptor, connector, acceptor, cn, an),
          linkKey(token, Role::kKeyToConnector, connector, acceptor, cn, an)};
}

bool proofHolds(std::string_view token, const Digest& got, const Digest& want) {
  return token.empty() || digestsEqual(got, want);
}

Status authFailure(Rank claimed) {
  return Status::unavailable(strCat("peer authentication failed: the peer claiming rank ", claimed,
                                    " did not prove knowledge of the cluster token; link refused (check that "
                                    "security.token_file holds the same token on every agent)"));
}

void putBytes(ByteWriter& w, std::span<const std::byte> bytes) {
  for (std::byte b : bytes) w.put(static_cast<uint8_t>(b));
}

template <size_t N>
bool getBytes(ByteReader& r, std::array<std::byte, N>& out) {
  if (!r.expect(N)) return false;
  for (auto& b : out) {
    uint8_t v = 0;
    r.get(v);
    b = static_cast<std::byte>(v);
  }
  return true;
}

// A UCX address: the rest of the body, at least one byte.
bool getAddress(std::span<const std::byte> body, size_t at, std::vector<std::byte>& out) {
  if (body.size() <= at) return false;
  out.assign(body.begin() + static_cast<ptrdiff_t>(at), body.end());
  return true;
}

}  // namespace

std::string_view refusalName(Refusal r) {
  switch (r) {
    case Refusal::kMalformed: return "malformed";
    case Refusal::kUnauthenticated: return "unauthenticated";
    case Refusal::kTimedOut: return "timed_out";
    case Refusal::kOverCapacity: return "over_capacity";
  }
  return "unknown";
}

Result<FrameHeader> parseFrameHeader(std::span<const std::byte> header) {
  ByteReader r(header);
  uint32_t magic = 0, bytes = 0;
  uint8_t version = 0, type = 0;
  uint16_t zero = 0;
  if (!r.get(magic) || !r.get(version) || !r.get(type) || !r.get(zero) || !r.get(bytes))
    return Status::invalidArgument(strCat("handshake: a frame header of ", header.size(), " bytes"));
  if (magic != kMagic) return Status::invalidArgument("handshake: not a gcagent peer (bad magic)");
  if (version != kVersion)
    return Status::invalidArgument(strCat("handshake: version ", static_cast<int>(version), ", this agent speaks ",
                                          static_cast<int>(kVersion)));
  if (type < static_cast<uint8_t>(FrameType::kHello) || type > static_cast<uint8_t>(FrameType::kRefusal) || zero != 0)
    return Status::invalidArgument(strCat("handshake: unknown frame type ", static_cast<int>(type)));
  if (bytes > kMaxFrameBody)
    return Status::invalidArgument(strCat("handshake: a frame of ", bytes, " bytes (at most ", kMaxFrameBody, ")"));
  return FrameHeader{static_cast<FrameType>(type), bytes};
}

std::vector<std::byte> encodeFrame(FrameType type, std::span<const std::byte> body) {
  ByteWriter w;
  w.put(kMagic);
  w.put(kVersion);
  w.put(static_cast<uint8_t>(type));
  w.put(uint16_t{0});
  w.put(static_cast<uint32_t>(body.size()));
  putBytes(w, body);
  return w.take();
}

Step AcceptorHandshake::onFrame(FrameType type, std::span<const std::byte> body) {
  if (type == FrameType::kRefusal) {
    stage_ = Stage::kDone;
    return refusedByPeer(peer_, body);
  }
  switch (stage_) {
    case Stage::kHello: {
      if (type != FrameType::kHello) return malformed("the first frame is not a hello");
      ByteReader r(body);
      uint32_t rank = 0, size = 0;
      if (!r.get(rank) || !r.get(size) || !getBytes(r, connector_nonce_) || r.remaining() != 0)
        return malformed(strCat("a hello of ", body.size(), " bytes"));
      if (size != self_.size)
        return malformed(strCat("the peer claiming rank ", rank, " has ", size, " agents in transport.peers, this one ",
                                self_.size, ": the lists differ"));
      if (rank >= self_.rank)
        return malformed(strCat("a hello from rank ", rank, ": only lower ranks connect to rank ", self_.rank));
      peer_ = rank;
      if (Status s = randomBytes(acceptor_nonce_); !s.ok()) return refuse(Refusal::kMalformed, s, false);
      ByteWriter w;
      w.put(static_cast<uint32_t>(self_.rank));
      putBytes(w, acceptor_nonce_);
      putBytes(w, handshakeProof(self_.token, Role::kAcceptor, peer_, self_.rank, connector_nonce_, acceptor_nonce_));
      putBytes(w, self_.address);
      stage_ = Stage::kProof;
      const auto challenge = w.take();
      return {encodeFrame(FrameType::kChallenge, challenge), std::nullopt, std::nullopt};
    }
    case Stage::kProof: {
      if (type != FrameType::kProof) return malformed("expected a proof");
      ByteReader r(body);
      Digest got{};
      Admitted admitted;
      if (!getBytes(r, got) || !getAddress(body, sizeof(Digest), admitted.peer_address))
        return malformed(strCat("a proof of ", body.size(), " bytes"));
      stage_ = Stage::kDone;
      const Digest want =
          handshakeProof(self_.token, Role::kConnector, peer_, self_.rank, connector_nonce_, acceptor_nonce_);
      if (!proofHolds(self_.token, got, want)) return refuse(Refusal::kUnauthenticated, authFailure(peer_));
      admitted.peer = peer_;
      admitted.keys = linkKeys(self_.token, peer_, self_.rank, connector_nonce_, acceptor_nonce_);
      return {encodeFrame(FrameType::kWelcome, {}), std::move(admitted), std::nullopt};
    }
    case Stage::kDone: break;
  }
  return malformed("a frame after the handshake ended");
}

Result<std::vector<std::byte>> ConnectorHandshake::start() {
  GC_RETURN_IF_ERROR(randomBytes(connector_nonce_));
  ByteWriter w;
  w.put(static_cast<uint32_t>(self_.rank));
  w.put(static_cast<uint32_t>(self_.size));
  putBytes(w, connector_nonce_);
  stage_ = Stage::kChallenge;
  const auto hello = w.take();
  return encodeFrame(FrameType::kHello, hello);
}

Step ConnectorHandshake::onFrame(FrameType type, std::span<const std::byte> body) {
  if (type == FrameType::kRefusal) {
    stage_ = Stage::kDone;
    return refusedByPeer(peer_, body);
  }
  switch (stage_) {
    case Stage::kChallenge: {
      if (type != FrameType::kChallenge) return malformed("expected a challenge");
      ByteReader r(body);
      uint32_t rank = 0;
      Digest proof{};
      if (!r.get(rank) || !getBytes(r, acceptor_nonce_) || !getBytes(r, proof) ||
          !getAddress(body, 4 + sizeof(Nonce) + sizeof(Digest), peer_address_))
        return malformed(strCat("a challenge of ", body.size(), " bytes"));
      if (rank != peer_) return malformed(strCat("rank ", peer_, "'s address answered as rank ", rank));
      const Digest want =
          handshakeProof(self_.token, Role::kAcceptor, self_.rank, peer_, connector_nonce_, acceptor_nonce_);
      if (!proofHolds(self_.token, proof, want)) {
        stage_ = Stage::kDone;
        return refuse(Refusal::kUnauthenticated, authFailure(peer_));
      }
      ByteWriter w;
      putBytes(w, handshakeProof(self_.token, Role::kConnector, self_.rank, peer_, connector_nonce_, acceptor_nonce_));
      putBytes(w, self_.address);
      stage_ = Stage::kWelcome;
      const auto reply = w.take();
      return {encodeFrame(FrameType::kProof, reply), std::nullopt, std::nullopt};
    }
    case Stage::kWelcome: {
      if (type != FrameType::kWelcome || !body.empty()) return malformed("expected a welcome");
      stage_ = Stage::kDone;
      Admitted admitted{peer_, std::move(peer_address_),
                        linkKeys(self_.token, self_.rank, peer_, connector_nonce_, acceptor_nonce_), {}};
      return {{}, std::move(admitted), std::nullopt};
    }
    case Stage::kStart:
    case Stage::kDone: break;
  }
  return malformed("a frame out of order");
}

}  // namespace gcagent::transport
