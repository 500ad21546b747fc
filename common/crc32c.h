#pragma once

// CRC-32C (Castagnoli, the polynomial of iSCSI, ext4 and SSE 4.2's crc32 instruction): the
// checksum of training checkpoints (train/checkpoint.h). With the instruction (x86-64 with SSE
// 4.2, ARMv8 with its CRC extension) it runs at several GB/s, where zlib's CRC-32 took 0.6 s of a
// 1.4 GiB checkpoint's write; elsewhere a table computes the same value.

#include <cstddef>
#include <cstdint>

namespace cart {

// Extends `crc` (0 to start) over `size` bytes at `data`: Crc32c(Crc32c(0, a), b) is the CRC of
// a followed by b. Crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t Crc32c(uint32_t crc, const void* data, size_t size);

// Whether Crc32c runs on the processor's instruction here (for benchmarks to say).
bool Crc32cInHardware();

}  // namespace cart
