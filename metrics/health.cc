#include "metrics/health.h"

#include <ctime>

#include "common/str_cat.h"

namespace gcagent::metrics {
namespace {

std::string jsonString(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// RFC 3339 in UTC with milliseconds: 2024-05-01T12:00:00.123Z.
std::string utcTime(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

}  // namespace

void Health::setRank(uint32_t rank, uint32_t peers_expected) {
  std::lock_guard lock(mu_);
  state_.rank = rank;
  state_.peers_expected = peers_expected;
}

void Health::setPeersConnected(uint32_t n) {
  std::lock_guard lock(mu_);
  state_.peers_connected = n;
}

void Health::setServing(bool serving) {
  std::lock_guard lock(mu_);
  state_.serving = serving;
}

void Health::setTrainers(uint32_t n) {
  std::lock_guard lock(mu_);
  state_.trainers = n;
}

void Health::setStalledJobs(uint32_t n) {
  std::lock_guard lock(mu_);
  state_.stalled_jobs = n;
}

void Health::setLostNode(std::optional<uint32_t> rank, std::string why) {
  std::lock_guard lock(mu_);
  state_.lost_node = rank;
  state_.lost_why = std::move(why);
}

void Health::setAwayNodes(std::vector<AwayNode> away) {
  std::lock_guard lock(mu_);
  state_.away_nodes = std::move(away);
}

void Health::recordError(std::string_view kind, std::string_view message) {
  LastError e{std::string(kind), std::string(message), std::chrono::system_clock::now()};
  std::lock_guard lock(mu_);
  ++state_.errors;
  state_.last_error = std::move(e);
}

HealthSnapshot Health::snapshot() const {
  std::lock_guard lock(mu_);
  return state_;
}

std::string healthJson(const HealthSnapshot& s, std::chrono::system_clock::time_point now) {
  std::string out = strCat("{\"status\":", jsonString(s.ready() ? "ready" : "not ready"), ",\"rank\":", s.rank,
                           ",\"peers_connected\":", s.peers_connected, ",\"peers_expected\":", s.peers_expected,
                           ",\"serving\":", s.serving ? "true" : "false", ",\"trainers\":", s.trainers,
                           ",\"stalled_jobs\":", s.stalled_jobs, ",\"lost_node\":");
  out += s.lost_node ? strCat("{\"rank\":", *s.lost_node, ",\"why\":", jsonString(s.lost_why), "}") : "null";
  out += ",\"away_nodes\":[";
  for (size_t i = 0; i < s.away_nodes.size(); ++i) {
    const AwayNode& a = s.away_nodes[i];
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f", a.seconds);
    out += strCat(i ? "," : "", "{\"rank\":", a.rank, ",\"seconds\":", seconds, ",\"shut_down\":",
                  a.shut_down ? "true" : "false", ",\"why\":", jsonString(a.why), "}");
  }
  out += strCat("],\"errors\":", s.errors, ",\"last_error\":");
  if (!s.last_error) return out + "null}\n";
  const LastError& e = *s.last_error;
  const double age = std::chrono::duration<double>(now - e.when).count();
  char age_text[32];
  std::snprintf(age_text, sizeof age_text, "%.3f", age < 0 ? 0.0 : age);
  return strCat(out, "{\"kind\":", jsonString(e.kind), ",\"message\":", jsonString(e.message),
                ",\"time\":", jsonString(utcTime(e.when)), ",\"seconds_ago\":", age_text, "}}\n");
}

}  // namespace gcagent::metrics
