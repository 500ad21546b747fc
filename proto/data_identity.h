#pragma once

// The one conversion between a data file's identity (data/file_identity.h) and its wire form,
// cart.v1.DataIdentity, for the client that records it at submit, the worker that records or
// checks it, and cartd. The message's role, path and recording fields are the caller's.

#include "cart/v1/common.pb.h"
#include "data/file_identity.h"

namespace cart::data {

// Sets `out`'s sha256, size, tokens and tokenizer fields; leaves the others.
void SetIdentity(const FileIdentity& id, v1::DataIdentity* out);
// The identity a message carries (meaningful only when its sha256 is set).
FileIdentity IdentityOf(const v1::DataIdentity& message);

}  // namespace cart::data
