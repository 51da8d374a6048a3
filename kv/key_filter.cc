// Key filters (key_filter.h).
#include "kv/key_filter.h"

#include <algorithm>
#include <new>

#include "storage/base/check.h"

namespace nvkv::kv {
namespace {

// The step between a key's bits: odd, so that the probes hit distinct bits, and mixing both
// halves of the hash (the index draws on lo, the shard on hi's top bits).
uint64_t FilterStep(const KeyHash& hash) {
  return ((hash.hi ^ (hash.lo >> 32 | hash.lo << 32)) * 0x9e3779b97f4a7c15ull) | 1;
}

}  // namespace

KeyFilter::KeyFilter(uint64_t words, uint32_t probes)
    : KeyFilter(words, probes, std::unique_ptr<std::atomic<uint64_t>[]>(
                                   new std::atomic<uint64_t>[words])) {}

KeyFilter::KeyFilter(uint64_t words, uint32_t probes,
                                   std::unique_ptr<std::atomic<uint64_t>[]> own_bits)
    : words_(words), probes_(probes), own_bits_(std::move(own_bits)), bits_(own_bits_.get()) {
  NVKV_CHECK((words & (words - 1)) == 0);
  for (uint64_t i = 0; i < words; ++i) bits_[i].store(0, std::memory_order_relaxed);
}

std::unique_ptr<KeyFilter> KeyFilter::OwnOrNull(uint64_t words, uint32_t probes) {
  std::unique_ptr<std::atomic<uint64_t>[]> bits(new (std::nothrow) std::atomic<uint64_t>[words]);
  std::unique_ptr<KeyFilter> filter(bits == nullptr ? nullptr
                                                    : new (std::nothrow) KeyFilter(
                                                          words, probes, std::move(bits)));
  return filter;
}

KeyFilter::KeyFilter(uint64_t words, uint32_t probes, const uint64_t* saved,
                                   std::atomic<uint64_t>* bits,
                                   std::shared_ptr<ZeroedBlock> block)
    : words_(words), probes_(probes), shared_block_(std::move(block)), bits_(bits) {
  NVKV_CHECK((words & (words - 1)) == 0);
  for (uint64_t i = 0; i < words; ++i) {
    new (&bits_[i]) std::atomic<uint64_t>(saved != nullptr ? saved[i] : 0);
  }
}

std::unique_ptr<KeyFilter> KeyFilter::InBlocks(uint64_t words,
                                                                           uint32_t probes,
                                                                           FilterBlocks& blocks,
                                                                           const uint64_t* saved) {
  std::shared_ptr<ZeroedBlock> block;
  std::atomic<uint64_t>* const bits = blocks.Take(words, &block);
  if (bits == nullptr) return nullptr;
  return std::unique_ptr<KeyFilter>(new KeyFilter(words, probes, saved, bits, std::move(block)));
}

std::atomic<uint64_t>* FilterBlocks::Take(uint64_t words,
                                                        std::shared_ptr<ZeroedBlock>* block) {
  constexpr uint64_t kBlockWords = (uint64_t{2} << 20) / sizeof(uint64_t);
  constexpr uint64_t kPopulateWords = (uint64_t{256} << 10) / sizeof(uint64_t);
  if (block_ == nullptr || used_words_ + words > block_->bytes() / sizeof(uint64_t)) {
    ZeroedBlock fresh = ZeroedBlock::Allocate(std::max(kBlockWords, words) * sizeof(uint64_t),
                                              ZeroedBlock::Pages::kSmall);
    if (fresh.data() == nullptr) return nullptr;
    block_ = std::make_shared<ZeroedBlock>(std::move(fresh));
    used_words_ = 0;
    populated_words_ = 0;
  }
  if (used_words_ + words > populated_words_) {
    const uint64_t count = std::max(kPopulateWords, used_words_ + words - populated_words_);
    block_->Populate(populated_words_ * sizeof(uint64_t), count * sizeof(uint64_t));
    populated_words_ += count;
  }
  *block = block_;
  std::atomic<uint64_t>* const at =
      static_cast<std::atomic<uint64_t>*>(block_->data()) + used_words_;
  used_words_ += words;
  return at;
}

void KeyFilter::Add(const KeyHash& hash) {
  const uint64_t mask = words_ * 64 - 1, step = FilterStep(hash);
  uint64_t bit = hash.lo;
  for (uint32_t i = 0; i < probes_; ++i, bit += step) {
    // One writer at a time (the caller's contract): a plain read and write, no locked
    // read-modify-write, and a reader beside it sees either word.
    std::atomic<uint64_t>& word = bits_[(bit & mask) / 64];
    word.store(word.load(std::memory_order_relaxed) | (uint64_t{1} << (bit % 64)),
               std::memory_order_relaxed);
  }
}

bool KeyFilter::MayContain(const KeyHash& hash) const {
  const uint64_t mask = words_ * 64 - 1, step = FilterStep(hash);
  uint64_t bit = hash.lo;
  for (uint32_t i = 0; i < probes_; ++i, bit += step) {
    const uint64_t word = bits_[(bit & mask) / 64].load(std::memory_order_relaxed);
    if ((word & (uint64_t{1} << (bit % 64))) == 0) return false;
  }
  return true;
}

void KeyFilter::CopyTo(std::vector<uint64_t>* words) const {
  words->resize(words_);
  for (uint64_t i = 0; i < words_; ++i) (*words)[i] = bits_[i].load(std::memory_order_relaxed);
}

void KeyFilter::FoldTo(uint64_t words) {
  NVKV_CHECK((words & (words - 1)) == 0);
  if (words >= words_) return;
  // Bit b of the smaller filter holds every bit b (mod its size) of this one: word i holds
  // words i, i + words, i + 2 * words... (bit positions within a word are kept).
  std::unique_ptr<std::atomic<uint64_t>[]> folded(new std::atomic<uint64_t>[words]);
  for (uint64_t i = 0; i < words; ++i) {
    uint64_t bits = 0;
    for (uint64_t j = i; j < words_; j += words) bits |= bits_[j].load(std::memory_order_relaxed);
    folded[i].store(bits, std::memory_order_relaxed);
  }
  own_bits_ = std::move(folded);
  shared_block_.reset();
  bits_ = own_bits_.get();
  words_ = words;
}

}  // namespace nvkv::kv
