# The tokenizers of CART Lab that transformers has no class for with the same ids
# (docs/huggingface.md "Tokenizers"): a SentencePiece model encoded by the sentencepiece library
# itself, as `cart data` encodes it, and CART Lab's byte tokenizer (UTF-8 bytes as ids 0..255,
# BOS 256, EOS 257). GPT-2 BPE needs none of this: transformers' own GPT-2 tokenizer reads the
# exported vocab.json and merges.txt.
#
# As in CART Lab, text that spells a special token ("<s>", "</s>") is encoded as text, never as
# the special id, and encoding adds no BOS or EOS unless the tokenizer is made with
# add_bos_token=True (as lm-eval's add_bos_token makes it).

import os
import shutil

from transformers import PreTrainedTokenizer


class _CartTokenizer(PreTrainedTokenizer):
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, add_bos_token=False, **kwargs):
        # add_bos_token: encoding with special tokens starts with BOS (lm-eval's add_bos_token,
        # CART Lab's eval_bos); off by default, as CART Lab's Encode adds none.
        self.add_bos_token = bool(add_bos_token)
        kwargs.setdefault("split_special_tokens", True)  # special ids only from ids, never text
        kwargs.setdefault("padding_side", "right")       # CART supports right padding only
        super().__init__(**kwargs)

    def convert_tokens_to_string(self, tokens):
        # Special tokens decode to their text ("<s>"), pieces between them as the tokenizer
        # decodes them: lm-eval tells whether a request starts with BOS by decoding BOS, and an
        # empty string there made it drop the BOS it was asked for.
        special = set(self.all_special_tokens)
        text, run = [], []
        for token in tokens:
            if token in special:
                text.append(self._pieces_to_text(run))
                text.append(token)
                run = []
            else:
                run.append(token)
        text.append(self._pieces_to_text(run))
        return "".join(text)

    def _bos(self):
        return [self.bos_token_id] if self.add_bos_token and self.bos_token_id is not None else []

    def build_inputs_with_special_tokens(self, token_ids_0, token_ids_1=None):
        return self._bos() + list(token_ids_0) + (list(token_ids_1) if token_ids_1 else [])

    def get_special_tokens_mask(self, token_ids_0, token_ids_1=None,
                                already_has_special_tokens=False):
        if already_has_special_tokens:
            special = set(self.all_special_ids)
            return [1 if i in special else 0 for i in token_ids_0 + (token_ids_1 or [])]
        return [1] * len(self._bos()) + [0] * (len(token_ids_0) + len(token_ids_1 or []))


class CartSentencePieceTokenizer(_CartTokenizer):
    """A SentencePiece model (tokenizer.model), encoded by the sentencepiece library."""

    vocab_files_names = {"vocab_file": "tokenizer.model"}

    def __init__(self, vocab_file, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                 **kwargs):
        import sentencepiece

        self.vocab_file = vocab_file
        self.sp = sentencepiece.SentencePieceProcessor(model_file=vocab_file)
        super().__init__(bos_token=bos_token, eos_token=eos_token, unk_token=unk_token, **kwargs)

    @property
    def vocab_size(self):
        return self.sp.get_piece_size()

    def get_vocab(self):
        return {self.sp.id_to_piece(i): i for i in range(self.vocab_size)}

    def _tokenize(self, text, **kwargs):
        return self.sp.encode(text, out_type=str)

    def _convert_token_to_id(self, token):
        return self.sp.piece_to_id(token)

    def _convert_id_to_token(self, index):
        return self.sp.id_to_piece(index)

    def _pieces_to_text(self, tokens):
        return self.sp.decode_pieces(tokens) if tokens else ""

    def save_vocabulary(self, save_directory, filename_prefix=None):
        name = (filename_prefix + "-" if filename_prefix else "") + "tokenizer.model"
        out = os.path.join(save_directory, name)
        if os.path.abspath(self.vocab_file) != os.path.abspath(out):
            shutil.copyfile(self.vocab_file, out)
        return (out,)


class CartByteTokenizer(_CartTokenizer):
    """UTF-8 bytes as ids 0..255, BOS 256, EOS 257. A byte's token is written <0xAB>."""

    def __init__(self, bos_token="<s>", eos_token="</s>", **kwargs):
        self._bytes = [f"<0x{b:02X}>" for b in range(256)]
        self._ids = {t: b for b, t in enumerate(self._bytes)}
        self._ids[bos_token] = 256
        self._ids[eos_token] = 257
        self._names = self._bytes + [bos_token, eos_token]
        super().__init__(bos_token=bos_token, eos_token=eos_token, **kwargs)

    @property
    def vocab_size(self):
        return 258

    def get_vocab(self):
        return dict(self._ids)

    def _tokenize(self, text, **kwargs):
        return [self._bytes[b] for b in text.encode("utf-8")]

    def _convert_token_to_id(self, token):
        return self._ids[token]

    def _convert_id_to_token(self, index):
        return self._names[index] if 0 <= index < 258 else "\ufffd"

    def _pieces_to_text(self, tokens):
        data = bytes(self._ids[t] for t in tokens if t in self._ids and self._ids[t] < 256)
        return data.decode("utf-8", errors="replace")

    def save_vocabulary(self, save_directory, filename_prefix=None):
        return ()
