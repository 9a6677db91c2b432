#include "shared_objects.h"

#include <algorithm>
#include <numeric>

namespace memoplan::planner {

std::vector<uint64_t> lay_out_shared_objects(const Problem& problem,
                                             const std::vector<size_t>& object_of_block) {
  size_t objects = 0;
  for (size_t object : object_of_block) objects = std::max(objects, object + 1);
  std::vector<uint64_t> object_size(objects, 0);
  for (size_t i = 0; i < object_of_block.size(); ++i) {
    object_size[object_of_block[i]] =
        std::max(object_size[object_of_block[i]], problem.blocks[i].size);
  }
  std::vector<size_t> order(objects);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return object_size[a] > object_size[b]; });
  std::vector<uint64_t> object_offset(objects, 0);
  uint64_t next = 0;
  for (size_t object : order) {
    object_offset[object] = next;
    next += object_size[object];
  }
  std::vector<uint64_t> offsets(object_of_block.size());
  for (size_t i = 0; i < object_of_block.size(); ++i)
    offsets[i] = object_offset[object_of_block[i]];
  return offsets;
}

}  // namespace memoplan::planner
