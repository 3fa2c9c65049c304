#include "agent/coding/host_stream.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace gcagent::agent {
namespace {

Status ok(std::vector<std::string>& ran, std::string name) {
  ran.push_back(std::move(name));
  return {};
}

TEST(HostStreamTest, RunsHighestPriorityFirstAndEachTagInOrder) {
  asio::io_context io;
  HostStream stream(io, HostStream::Mode::kManual);
  std::vector<std::string> ran;
  stream.enqueue(1, -5, [&] { return ok(ran, "low a"); });
  stream.enqueue(2, 0, [&] { return ok(ran, "high a"); });
  stream.enqueue(1, -5, [&] { return ok(ran, "low b"); });
  stream.enqueue(9, HostStream::kLast, [&] { return ok(ran, "free"); });
  stream.enqueue(2, 0, [&] { return ok(ran, "high b"); });
  stream.enqueue(3, -1, [&] { return ok(ran, "middle"); });
  EXPECT_FALSE(stream.idle());
  stream.drain();
  EXPECT_EQ(ran, (std::vector<std::string>{"high a", "high b", "middle", "low a", "low b", "free"}));
  EXPECT_TRUE(stream.idle());
}

TEST(HostStreamTest, AReportCarriesItsTagsFirstFailureOnly) {
  asio::io_context io;
  HostStream stream(io, HostStream::Mode::kManual);
  stream.enqueue(1, 0, [] { return Status::invalidArgument("first of 1"); });
  stream.enqueue(1, 0, [] { return Status::internal("second of 1"); });
  stream.enqueue(2, 0, [] { return Status(); });
  std::vector<Status> reports(3, Status::internal("no report"));
  stream.after(2, 0, [&](const Status& s) { reports[0] = s; });
  stream.after(1, 0, [&](const Status& s) { reports[1] = s; });
  stream.after(1, 0, [&](const Status& s) { reports[2] = s; });  // the failure was reported
  stream.drain();
  EXPECT_FALSE(stream.idle()) << "reports wait for the io context";
  io.run();
  EXPECT_TRUE(reports[0].ok()) << reports[0].toString();
  EXPECT_EQ(reports[1].code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reports[1].message(), "first of 1");
  EXPECT_TRUE(reports[2].ok());
  EXPECT_TRUE(stream.idle());
}

TEST(HostStreamTest, ACancelDropsItsTagsQueuedWorkAndReportsAfterIt) {
  asio::io_context io;
  HostStream stream(io, HostStream::Mode::kManual);
  std::vector<std::string> ran;
  stream.enqueue(1, 0, [&] { return ok(ran, "1: before"); });
  stream.enqueue(1, 0, [] { return Status::dataLoss("a failure of the given-up work"); });
  stream.enqueue(2, 0, [&] { return ok(ran, "2: other tag"); });
  std::optional<Status> cancelled;
  stream.cancel(1, 0, [&](const Status& s) {
    ran.push_back("cancel reported");
    cancelled = s;
  });
  stream.enqueue(1, 0, [&] { return ok(ran, "1: after"); });  // the next step's: runs
  std::optional<Status> later;
  stream.after(1, 0, [&](const Status& s) { later = s; });
  stream.drain();
  io.run();
  EXPECT_EQ(ran, (std::vector<std::string>{"2: other tag", "1: after", "cancel reported"}));
  ASSERT_TRUE(cancelled && later);
  EXPECT_TRUE(cancelled->ok()) << cancelled->toString();
  EXPECT_TRUE(later->ok()) << later->toString();
  EXPECT_TRUE(stream.idle());
}

TEST(HostStreamTest, AThreadRunsTheWorkAndIoRunWaitsForTheReport) {
  asio::io_context io;
  HostStream stream(io);
  std::shared_ptr<int> pin = std::make_shared<int>(7);
  std::weak_ptr<int> watched = pin;
  std::vector<int> values(1000, 1);
  stream.enqueue(4, 0, [&] {
    for (int& v : values) v *= 3;
    return Status();
  });
  stream.hold(4, 0, std::move(pin));
  stream.hold(4, 0, nullptr);  // nothing to keep: no item at all
  bool reported = false;
  stream.after(4, 0, [&](const Status& s) { reported = s.ok(); });
  io.run();  // returns once the report and the release have run here
  EXPECT_TRUE(reported);
  EXPECT_TRUE(watched.expired()) << "released after the work";
  EXPECT_EQ(values, std::vector<int>(1000, 3));
  EXPECT_TRUE(stream.idle());
}

}  // namespace
}  // namespace gcagent::agent
