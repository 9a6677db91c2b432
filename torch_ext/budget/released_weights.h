// Weights held once on the tuned path (PlanOptions::release_weights): the module's weights move
// into a file-backed mapping (weight_file.h) before its first planned pass, and once plan() has
// packed them, their pages are given back. A weight that some path still reads in its plain form
// faults its pages in again from the file and keeps that one copy; a weight read only through its
// packings stays out of memory. The mapping is read-only: the module's weights may no longer be
// changed in place. No torch headers here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace torch::jit {
struct Graph;
struct Module;
}  // namespace torch::jit

namespace memoplan::torch_ext::budget {

// Maps every CPU tensor of at least a page among `module`'s attributes (parameters, buffers, of
// every submodule) and `graph`'s tensor constants (a frozen module's weights) from a file in `dir`
// (empty: as the budget's). Throws std::runtime_error naming the file when it cannot be written.
void map_for_release(torch::jit::Module& module, const torch::jit::Graph& graph, int64_t id,
                     const std::string& dir);
// Gives back the pages of `id`'s weights (a no-op for a module that has none mapped).
void drop_released(int64_t id);

// Called by the tuned kernels when a packed form was just made (tuned/weight_cache.h), a weight
// folded for a measurement or a measurement done: where any module holds released weights, the
// pages of every released mapping go back now, not only at the end of plan(), so planning never
// holds every plain weight beside every packed one, and so does what the allocator keeps free.
// The pages a path reads in plain form come back from the file at its next read (the mappings
// are read-only and shared: a concurrent reader sees the same bytes).
void give_back_plain_weights();
// Gives back the pages wholly inside [data, data + bytes) where they lie in a released weights'
// mapping (a no-op elsewhere): a packing made in slices gives back each slice's rows once packed,
// so a layer never holds its whole plain weight beside its packing.
void give_back_plain_range(const void* data, size_t bytes);

// The module will not run again: its mapping goes once its weights' storages have died.
void forget_released(int64_t id);

struct ReleasedWeights {
  uint64_t mapped_bytes = 0;    // the weights moved into the file
  uint64_t resident_bytes = 0;  // of them in this process's memory now
};
ReleasedWeights released_weights(int64_t id);

}  // namespace memoplan::torch_ext::budget
