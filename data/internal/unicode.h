#pragma once

// The few Unicode facts the GPT-2 pre-tokenizer needs: UTF-8 decoding and the classes
// \p{L}, \p{N} and \s of its regex.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cart::data::internal {

// Decodes the code point starting at text[pos]. Sets *len to the bytes it spans (1..4). A byte
// that does not start a valid, shortest-form UTF-8 sequence decodes as itself with *len = 1 and
// the result 0xFFFFFFFF, which belongs to no class below (the pre-tokenizer treats it as a symbol).
uint32_t DecodeUtf8(std::string_view text, size_t pos, size_t* len);

bool IsLetter(uint32_t cp);  // general category L*
bool IsNumber(uint32_t cp);  // general category N*
bool IsSpace(uint32_t cp);   // the White_Space property

}  // namespace cart::data::internal
