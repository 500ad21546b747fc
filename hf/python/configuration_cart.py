# The configuration of a CART model exported by `cart export --format hf` (docs/huggingface.md).
# Every switch of docs/model.md §4 keeps the name it has in CART Lab's run configs (§9), so a
# config.json reads like the run config it came from; the Hugging Face names (vocab_size,
# hidden_size, ...) are set beside them for the tools that look for those.

from transformers import PretrainedConfig

_CHOICES = {
    "model": ("cart", "dense"),
    "kv": ("frozen", "recompute"),
    "core": ("shared", "unshared"),
    "core_attn": ("cross", "self"),
    "gate": ("paper", "delta"),
}
HEAD_DIM = 64
MAX_LOOPS = 16  # rows of the loop-index table (docs/model.md §3)


def mlp_hidden(d):
    """SwiGLU's hidden width, ceil(floor(8d/3) / 256) * 256 (docs/model.md §1)."""
    return -(-((8 * d) // 3) // 256) * 256


class CartConfig(PretrainedConfig):
    model_type = "cart"

    def __init__(
        self,
        vocab_size=32000,
        d=256,
        P=6,
        R=6,
        R_infer=0,
        layers=0,
        model="cart",
        kv="frozen",
        core="shared",
        core_attn="cross",
        hyper=True,
        lti=True,
        lie=True,
        cross_causal=True,
        gate="paper",
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=True,
        **kwargs,
    ):
        for key, value in (("model", model), ("kv", kv), ("core", core),
                           ("core_attn", core_attn), ("gate", gate)):
            if value not in _CHOICES[key]:
                raise ValueError(f"CartConfig: {key} = {value!r}; allowed values: "
                                 f"{', '.join(_CHOICES[key])}")
        if d <= 0 or d % HEAD_DIM != 0:
            raise ValueError(f"CartConfig: d = {d}; allowed values: positive multiples of 64")
        if vocab_size <= 0:
            raise ValueError(f"CartConfig: vocab_size = {vocab_size}; it must be positive")
        if model == "cart":
            if not 1 <= R <= MAX_LOOPS:
                raise ValueError(f"CartConfig: R = {R}; allowed values: 1..{MAX_LOOPS}")
            if not 0 <= R_infer <= MAX_LOOPS:
                raise ValueError(f"CartConfig: R_infer = {R_infer}; allowed values: 0..{MAX_LOOPS} "
                                 "(0: the trained R)")
            if P < 0:
                raise ValueError(f"CartConfig: P = {P}; it must be 0 or more")
        elif layers < 1:
            raise ValueError(f"CartConfig: layers = {layers}; a dense model needs 1 or more")
        self.vocab_size = vocab_size
        self.d = d
        self.P = P
        self.R = R
        self.R_infer = R_infer
        self.layers = layers
        self.model = model
        self.kv = kv
        self.core = core
        self.core_attn = core_attn
        self.hyper = bool(hyper)
        self.lti = bool(lti)
        self.lie = bool(lie)
        self.cross_causal = bool(cross_causal)
        self.gate = gate
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        # The names other tools read.
        self.hidden_size = d
        self.num_attention_heads = d // HEAD_DIM
        self.head_dim = HEAD_DIM
        self.intermediate_size = mlp_hidden(d)
        self.num_hidden_layers = layers if model == "dense" else P + 1
        super().__init__(bos_token_id=bos_token_id, eos_token_id=eos_token_id,
                         pad_token_id=pad_token_id, tie_word_embeddings=tie_word_embeddings,
                         **kwargs)

    @property
    def loops(self):
        """Loops at inference when forward() is not told: R_infer, or R when that is 0."""
        return self.R_infer if self.R_infer > 0 else self.R
