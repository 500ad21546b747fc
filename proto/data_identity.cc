#include "proto/data_identity.h"

namespace cart::data {

void SetIdentity(const FileIdentity& id, v1::DataIdentity* out) {
  out->set_sha256(id.sha256);
  out->set_size_bytes(id.size_bytes);
  out->set_tokens(id.tokens);
  out->set_tokenizer(id.tokenizer);
  out->set_tokenizer_sha256(id.tokenizer_sha256);
}

FileIdentity IdentityOf(const v1::DataIdentity& message) {
  FileIdentity id;
  id.sha256 = message.sha256();
  id.size_bytes = message.size_bytes();
  id.tokens = message.tokens();
  id.tokenizer = message.tokenizer();
  id.tokenizer_sha256 = message.tokenizer_sha256();
  return id;
}

}  // namespace cart::data
