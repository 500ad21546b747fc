#pragma once

// Implementation of Gpt2PreTokenize (declared in tokenizers.h).

#include <string_view>

#include "data/internal/unicode.h"

namespace cart::data::internal {

template <typename Emit>
void Gpt2PreTokenize(std::string_view text, Emit emit) {
  enum Class { kLetter, kNumber, kSpace, kOther };
  const auto class_at = [&](size_t pos, size_t* len) {
    const uint32_t cp = DecodeUtf8(text, pos, len);
    if (IsLetter(cp)) return kLetter;
    if (IsNumber(cp)) return kNumber;
    if (IsSpace(cp)) return kSpace;
    return kOther;
  };
  // End of the run of characters of class c starting at pos (pos itself must be of class c).
  const auto run_end = [&](size_t pos, Class c) {
    size_t len;
    while (pos < text.size() && class_at(pos, &len) == c) pos += len;
    return pos;
  };
  size_t pos = 0;
  while (pos < text.size()) {
    // 's 't 're 've 'm 'll 'd
    if (text[pos] == '\'' && pos + 1 < text.size()) {
      const std::string_view rest = text.substr(pos + 1, 2);
      size_t n = 0;
      if (rest.substr(0, 2) == "re" || rest.substr(0, 2) == "ve" || rest.substr(0, 2) == "ll") {
        n = 3;
      } else if (rest[0] == 's' || rest[0] == 't' || rest[0] == 'm' || rest[0] == 'd') {
        n = 2;
      }
      if (n > 0) {
        emit(pos, n);
        pos += n;
        continue;
      }
    }
    size_t len;
    // An optional single ' ' before a letter, number or symbol run.
    size_t start = pos;
    size_t body = pos;
    if (text[pos] == ' ' && pos + 1 < text.size()) body = pos + 1;
    Class c = class_at(body, &len);
    if (body != pos && c == kSpace) {
      body = pos;
      c = kSpace;
    }
    if (c != kSpace) {
      // ` ?[^\s\p{L}\p{N}]+` takes symbols (kOther) only; letters and numbers take their run.
      const size_t end = run_end(body, c);
      emit(start, end - start);
      pos = end;
      continue;
    }
    // Whitespace: \s+(?!\S) keeps the last space for the next token when a non-space follows
    // and the run is longer than one character; otherwise \s+ takes the whole run.
    const size_t end = run_end(pos, kSpace);
    size_t take = end - pos;
    if (end < text.size()) {
      size_t last_start = pos;
      for (size_t p = pos; p < end; p += len) {
        last_start = p;
        class_at(p, &len);
      }
      if (last_start > pos) take = last_start - pos;
    }
    emit(pos, take);
    pos += take;
  }
}

}  // namespace cart::data::internal
