// Decides whether a problem fits a given capacity, by a depth-first search over canonical plans in
// the manner of MiniMalloc (Moffitt, ASPLOS 2023). Written for memoplan from the paper's ideas.
//
// Canonical plans. Take a plan whose offsets have the least sum: every block then rests on a
// lifetime-overlapping block (or on 0). Listed by (offset, rank), each block's offset is the
// highest top among the overlapping blocks listed before it. So the search builds plans in that
// order only: each step places one unplaced block at its floor (the highest top of its placed
// neighbours) and never below the previous step's (offset, rank). Every fitting problem has such
// a plan, and each plan is built once.
//
// Pruning, each sound for the least-sum plans above:
//  - Sections (time_sections.h): the unplaced blocks live in a section all go above the lowest of
//    their floors and above the last offset placed, stacked; if that overflows the capacity, the
//    branch fails (MiniMalloc's section inference).
//  - Gaps: a step may not place a block at or above some unplaced block's floor + size: that block
//    would keep a free slot below it forever, so the plan would not have the least sum.
//  - Capped blocks: if the step's block has no unplaced neighbour, nothing later can move it, and
//    any sibling step would have to place it below itself: when its branch fails, the node does.
//  - Twins: blocks of one size living in the same sections are interchangeable; they are placed
//    in index order.
//  - Decomposition: once every block crossing a section boundary is placed, the two sides share no
//    unplaced block and are searched separately (each starting over at its lowest floor), so a
//    failure on one side does not re-search the other.
// A rank breaks ties among equal floors: the caller names the keys to rank blocks by, and each
// part is ranked when its search starts, by what is left of it then (as MiniMalloc re-sorts its
// sub-problems). Different keys make very different searches (exact_capacity.h restarts over
// several).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "memoplan/planner/problem.h"
#include "time_sections.h"

namespace memoplan::planner {

// What a rank compares, larger first; ties by block index.
enum class RankKey : uint8_t {
  kSectionLoad,  // the unplaced bytes of the fullest section the block lives in
  kLifetime,     // end - begin, in ticks
  kArea,         // size * lifetime
  kSize,
};
using RankOrder = std::array<RankKey, 3>;

struct ExactSearchLimits {
  uint64_t max_nodes = 0;  // search nodes visited at most; 0: no cap
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

enum class ExactOutcome {
  kFound,       // offsets() is a plan within the capacity
  kInfeasible,  // proven: no plan fits the capacity
  kStopped,     // a limit stopped the search first
};

class ExactSearch {
 public:
  // Both must outlive the search.
  ExactSearch(const Problem& problem, const TimeSections& sections);

  // Searches for a plan whose slab is at most `capacity` bytes, breaking ties by `order`.
  // Deterministic for a given node cap.
  ExactOutcome run(uint64_t capacity, const RankOrder& order, const ExactSearchLimits& limits);

  // The plan of the last run that returned kFound.
  const std::vector<uint64_t>& offsets() const { return solution_; }
  // Search nodes (partial plans) the last run visited.
  uint64_t nodes() const { return nodes_; }

 private:
  ExactOutcome search(size_t part_begin, size_t part_end, uint32_t lo, uint32_t hi,
                      uint64_t last_offset, uint32_t last_rank);
  ExactOutcome search_parts(size_t part_begin, size_t part_end, uint32_t lo, uint32_t hi,
                            uint32_t placed);
  bool place(uint32_t block, uint64_t offset, bool& capped, uint32_t& from, uint32_t& to);
  void unplace(uint32_t block, size_t trail_mark);
  void fullest_around(uint32_t lo, uint32_t hi);
  bool stacks_fit(size_t mark, uint32_t lo, uint32_t hi, uint32_t block, uint64_t offset) const;
  bool is_capped(uint32_t block) const;
  bool floors_fit(uint32_t from, uint32_t to) const;
  bool out_of_budget();
  void rank_part(size_t part_begin, size_t part_end);

  const Problem& problem_;
  const TimeSections& t_;
  const size_t n_;
  const uint64_t clock_every_;  // nodes between reads of the clock

  // Per run.
  uint64_t capacity_ = 0;
  RankOrder order_{};
  ExactSearchLimits limits_;
  uint64_t nodes_ = 0;
  bool stopped_ = false;
  std::vector<uint32_t> twin_before_;  // the twin of the next lower index, or kNone

  // Search state, restored on backtracking.
  std::vector<uint64_t> offset_;     // kUnplaced while unplaced
  std::vector<uint64_t> floor_;      // highest top of the placed neighbours
  std::vector<uint64_t> remaining_;  // unplaced bytes in section s
  std::vector<uint32_t> crossing_;   // unplaced blocks living in both s and s + 1
  struct FloorChange {
    uint32_t block;
    uint64_t floor;
  };
  std::vector<FloorChange> trail_;
  std::vector<uint32_t> rank_;  // position in its part's ranking
  struct RankChange {
    uint32_t block;
    uint32_t rank;
  };
  std::vector<RankChange> rank_trail_;
  std::vector<std::pair<std::array<uint64_t, 3>, uint32_t>> rank_keys_;  // scratch

  // Stacks shared by the recursion: each level appends its own segment and truncates it on return.
  std::vector<uint32_t> parts_;                         // the blocks of each part being searched
  std::vector<uint32_t> candidates_;                    // each node's candidate steps
  std::vector<uint64_t> fullest_left_, fullest_right_;  // see fullest_around()

  std::vector<uint64_t> solution_;
};

}  // namespace memoplan::planner
