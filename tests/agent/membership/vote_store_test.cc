// The file a node's membership votes outlive a restart in: what it holds, read back whole or
// refused (naming the file, the cause and the way out), and a write that fails as a value.
#include "agent/membership/vote_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace gcagent::agent {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

VoteRecord accepted() {
  VoteRecord r;
  r.installed = {1, 0, 0, {0, 1, 2}, {}};
  r.promised = {4, 1};
  r.accepted = std::make_pair(Ballot{3, 2}, MembershipView{2, 2, 0, {1, 2}, {2}});
  return r;
}

class VoteStoreTest : public ::testing::Test {
 protected:
  VoteStoreTest() {
    std::string pattern = ::testing::TempDir() + "/gcagent-votes-XXXXXX";
    dir_ = ::mkdtemp(pattern.data());
    state_ = dir_ + "/state";
  }
  ~VoteStoreTest() override { fs::remove_all(dir_); }

  std::string file() const { return state_ + "/membership-votes"; }
  std::string read() const {
    std::ifstream in(file(), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void write(const std::string& bytes) const { std::ofstream(file(), std::ios::binary | std::ios::trunc) << bytes; }

  std::string dir_, state_;
};

TEST_F(VoteStoreTest, ARecordReadsBackAsItWasWritten) {
  for (const VoteRecord& r : {accepted(), VoteRecord{{0, 0, 0, {0, 1, 2}, {}}, {}, {}}}) {
    auto back = decodeVoteRecord(encodeVoteRecord(r, 1, 3), 1, 3);
    ASSERT_TRUE(back.ok()) << back.status().toString();
    EXPECT_EQ(*back, r);
  }
  EXPECT_EQ(describeVotes(accepted()),
            "installed epoch 1 (nodes 0, 1, 2); promised ballot 4.1; accepted epoch 2 (nodes 1, 2) at ballot 3.2");
}

TEST_F(VoteStoreTest, AFirstStartMakesTheDirectoryAndKeepsNothingThenARestartReadsTheLastRecord) {
  auto fresh = VoteStore::open(state_, 1, 3);
  ASSERT_TRUE(fresh.ok()) << fresh.status().toString();
  EXPECT_FALSE(fresh->kept());
  EXPECT_EQ(fresh->path(), file());
  EXPECT_EQ(fs::status(state_).permissions() & fs::perms::all, fs::perms::owner_all);
  ASSERT_TRUE(fs::exists(file())) << "written at the start: a directory that takes no file fails then";
  ASSERT_TRUE(fresh->save(accepted()).ok());
  EXPECT_FALSE(fs::exists(file() + ".new"));
  auto restarted = VoteStore::open(state_, 1, 3);
  ASSERT_TRUE(restarted.ok()) << restarted.status().toString();
  EXPECT_EQ(restarted->kept(), accepted());
  // What the agent hands Membership: the record and a way to replace it.
  VoteKeeping keeping = restarted->keeping();
  EXPECT_EQ(keeping.kept, accepted());
  VoteRecord later = accepted();
  later.promised = {9, 0};
  ASSERT_TRUE(keeping.keep(later).ok());
  EXPECT_EQ(VoteStore::open(state_, 1, 3)->kept(), later);
}

TEST_F(VoteStoreTest, ACorruptFileStopsTheStartNamingItTheCauseAndTheWayOut) {
  ASSERT_TRUE(VoteStore::open(state_, 1, 3)->save(accepted()).ok());
  const std::string good = read();
  std::string flipped = good;
  flipped[30] ^= 0x04;
  write(flipped);
  auto corrupt = VoteStore::open(state_, 1, 3);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(corrupt.status().message(), HasSubstr(file() + ": checksum mismatch: the file is corrupt. The agent does "
                                                    "not start: it would vote on the job's membership without the "
                                                    "promises it made before it stopped"));
  EXPECT_THAT(corrupt.status().message(), HasSubstr("stop every agent of the job, then delete membership-votes in "
                                                    "every agent's agent.state_dir"));
  EXPECT_EQ(read(), flipped) << "a file refused is left as it was";
  write(good.substr(0, good.size() - 9));
  EXPECT_THAT(VoteStore::open(state_, 1, 3).status().message(),
              HasSubstr(file() + ": truncated: " + std::to_string(good.size() - 9) + " bytes end inside the record"));
  write("");
  EXPECT_THAT(VoteStore::open(state_, 1, 3).status().message(), HasSubstr("truncated: 0 bytes"));
  write(good + "x");
  EXPECT_THAT(VoteStore::open(state_, 1, 3).status().message(), HasSubstr("1 bytes after the record"));
  write("GCAP" + good.substr(4));
  EXPECT_THAT(VoteStore::open(state_, 1, 3).status().message(), HasSubstr("not a gcagent vote record (bad magic)"));
}

TEST_F(VoteStoreTest, AnotherNodesVotesAreRefused) {
  ASSERT_TRUE(VoteStore::open(state_, 1, 3)->save(accepted()).ok());
  auto other = VoteStore::open(state_, 2, 3);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().message(),
            file() + ": the votes of node 1 of 3; this agent is node 2 of 3 (agent.node_rank, transport.peers): each "
                     "agent needs an agent.state_dir of its own");
  EXPECT_THAT(VoteStore::open(state_, 1, 4).status().message(), HasSubstr("the votes of node 1 of 3"));
}

TEST_F(VoteStoreTest, ARecordThatBreaksTheAgreementsRulesIsRefused) {
  VoteRecord r = accepted();
  r.accepted->second.parent = 1;  // follows another view
  EXPECT_EQ(decodeVoteRecord(encodeVoteRecord(r, 1, 3), 1, 3).status().message(),
            "accepted epoch 2 (nodes 1, 2) does not follow installed epoch 1 (nodes 0, 1, 2)");
  r = accepted();
  r.accepted->first = {5, 0};
  EXPECT_EQ(decodeVoteRecord(encodeVoteRecord(r, 1, 3), 1, 3).status().message(),
            "accepted ballot 5.0 is above the promised one");
  r = accepted();
  r.installed.members = {0, 3};
  EXPECT_EQ(decodeVoteRecord(encodeVoteRecord(r, 1, 3), 1, 3).status().message(),
            "installed view: member rank 3 of 3 nodes");
}

TEST_F(VoteStoreTest, AWriteThatFailsIsAnErrorNamingTheFile) {
  auto store = VoteStore::open(state_, 1, 3);
  ASSERT_TRUE(store.ok());
  fs::remove_all(state_);
  const Status failed = store->save(accepted());
  EXPECT_EQ(failed.code(), StatusCode::kUnavailable);
  EXPECT_EQ(failed.message(), "cannot keep this node's membership votes: create " + file() +
                                  ".new: No such file or directory");
  std::ofstream(state_) << "a file";
  EXPECT_EQ(VoteStore::open(state_, 1, 3).status().message(), "agent.state_dir '" + state_ + "' is not a directory");
  EXPECT_THAT(VoteStore::open(dir_ + "/no/such", 1, 3).status().message(),
              HasSubstr("agent.state_dir '" + dir_ + "/no/such': No such file or directory"));
}

}  // namespace
}  // namespace gcagent::agent
