"""HSTU, the generative recommender of "Actions Speak Louder than Words" (Zhai et al. 2024), as
its reference code writes it (facebookresearch/generative-recommenders,
generative_recommenders/modeling/sequential/hstu.py): the last 4 of the 16
SequentialTransductionUnitJagged layers of its HSTU-large MovieLens-20M configuration
(configs/ml-20m/hstu-sampled-softmax-n128-large-final.gin: item_embedding_dim 256, num_heads 8,
dqk 32, dv 32; normalization "rel_bias", linear_config "uvqk", linear_activation "silu") and the
L2-norm output postprocessor. Each layer: F.layer_norm without affine (eps 1e-6), torch.mm with
the uvqk parameter (256 -> 1024), SiLU, torch.split into u, v, q, k; the pointwise attention
einsum("bnhd,bmhd->bhnm") plus RelativeBucketedTimeAndPositionBasedBias (the positional bias
cut from a padded, repeated and reshaped 1-D table, the timestamp gaps bucketized by log(|dt|) /
0.301 and gathered by index_select), F.silu(qk) / n, times the causal mask (1 - triu), einsum
with v; then u * layer_norm(attn_output), the output Linear and the residual. N = 211 (200
history items + gr_output_length 10 + 1); every history is full length, so fbgemm's
jagged_to_padded_dense and dense_to_jagged are plain reshapes here. A recommender block
(sequential user modeling) at the evaluation batch of 128 users (dropout inactive in inference)."""

from collections.abc import Callable

import torch
import torch.nn.functional as F

EMBEDDING_DIM, NUM_HEADS, DQK, DV = 256, 8, 32, 32
MAX_SEQUENCE_LEN, GR_OUTPUT_LENGTH, NUM_BLOCKS = 200, 10, 4
BATCH = 128


def jagged_to_padded_dense(values, offsets, max_lengths, padding_value=0.0):
    """torch.ops.fbgemm.jagged_to_padded_dense where every sequence is max_lengths[0] long."""
    B = offsets[0].size(0) - 1
    return values.view(B, max_lengths[0], -1)


def dense_to_jagged(dense, offsets):
    """torch.ops.fbgemm.dense_to_jagged where every sequence fills the dense length."""
    return (dense.reshape(-1, dense.size(-1)),)


class RelativeAttentionBiasModule(torch.nn.Module):
    def forward(self, all_timestamps: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class RelativeBucketedTimeAndPositionBasedBias(RelativeAttentionBiasModule):
    """
    Bucketizes timespans based on ts(next-item) - ts(current-item).
    """

    def __init__(
        self,
        max_seq_len: int,
        num_buckets: int,
        bucketization_fn: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        super().__init__()

        self._max_seq_len: int = max_seq_len
        self._ts_w = torch.nn.Parameter(
            torch.empty(num_buckets + 1).normal_(mean=0, std=0.02),
        )
        self._pos_w = torch.nn.Parameter(
            torch.empty(2 * max_seq_len - 1).normal_(mean=0, std=0.02),
        )
        self._num_buckets: int = num_buckets
        self._bucketization_fn: Callable[[torch.Tensor], torch.Tensor] = bucketization_fn

    def forward(
        self,
        all_timestamps: torch.Tensor,
    ) -> torch.Tensor:
        """
        Args:
            all_timestamps: (B, N).
        Returns:
            (B, N, N).
        """
        B = all_timestamps.size(0)
        N = self._max_seq_len
        t = F.pad(self._pos_w[: 2 * N - 1], [0, N]).repeat(N)
        t = t[..., :-N].reshape(1, N, 3 * N - 2)
        r = (2 * N - 1) // 2

        # [B, N + 1] to simplify tensor manipulations.
        ext_timestamps = torch.cat([all_timestamps, all_timestamps[:, N - 1 : N]], dim=1)
        # causal masking. Otherwise [:, :-1] - [:, 1:] works
        bucketed_timestamps = torch.clamp(
            self._bucketization_fn(ext_timestamps[:, 1:].unsqueeze(2) - ext_timestamps[:, :-1].unsqueeze(1)),
            min=0,
            max=self._num_buckets,
        ).detach()
        rel_pos_bias = t[:, :, r:-r]
        rel_ts_bias = torch.index_select(self._ts_w, dim=0, index=bucketed_timestamps.view(-1)).view(B, N, N)
        return rel_pos_bias + rel_ts_bias


def _hstu_attention_maybe_from_cache(
    num_heads: int,
    attention_dim: int,
    linear_dim: int,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    x_offsets: torch.Tensor,
    all_timestamps: torch.Tensor | None,
    invalid_attn_mask: torch.Tensor,
    rel_attn_bias: RelativeAttentionBiasModule,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    B: int = x_offsets.size(0) - 1
    n: int = invalid_attn_mask.size(-1)
    padded_q = jagged_to_padded_dense(values=q, offsets=[x_offsets], max_lengths=[n], padding_value=0.0)
    padded_k = jagged_to_padded_dense(values=k, offsets=[x_offsets], max_lengths=[n], padding_value=0.0)

    qk_attn = torch.einsum(
        "bnhd,bmhd->bhnm",
        padded_q.view(B, n, num_heads, attention_dim),
        padded_k.view(B, n, num_heads, attention_dim),
    )
    if all_timestamps is not None:
        qk_attn = qk_attn + rel_attn_bias(all_timestamps).unsqueeze(1)
    qk_attn = F.silu(qk_attn) / n
    qk_attn = qk_attn * invalid_attn_mask.unsqueeze(0).unsqueeze(0)
    attn_output = dense_to_jagged(
        torch.einsum(
            "bhnm,bmhd->bnhd",
            qk_attn,
            jagged_to_padded_dense(v, [x_offsets], [n]).reshape(B, n, num_heads, linear_dim),
        ).reshape(B, n, num_heads * linear_dim),
        [x_offsets],
    )[0]
    return attn_output, padded_q, padded_k


class SequentialTransductionUnitJagged(torch.nn.Module):
    def __init__(
        self,
        embedding_dim: int,
        linear_hidden_dim: int,
        attention_dim: int,
        dropout_ratio: float,
        attn_dropout_ratio: float,
        num_heads: int,
        linear_activation: str,
        relative_attention_bias_module: RelativeAttentionBiasModule | None = None,
        normalization: str = "rel_bias",
        linear_config: str = "uvqk",
        concat_ua: bool = False,
        epsilon: float = 1e-6,
        max_length: int | None = None,
    ) -> None:
        super().__init__()
        self._embedding_dim: int = embedding_dim
        self._linear_dim: int = linear_hidden_dim
        self._attention_dim: int = attention_dim
        self._dropout_ratio: float = dropout_ratio
        self._attn_dropout_ratio: float = attn_dropout_ratio
        self._num_heads: int = num_heads
        self._rel_attn_bias: RelativeAttentionBiasModule | None = relative_attention_bias_module
        self._normalization: str = normalization
        self._linear_config: str = linear_config
        if self._linear_config == "uvqk":
            self._uvqk: torch.nn.Parameter = torch.nn.Parameter(
                torch.empty(
                    (
                        embedding_dim,
                        linear_hidden_dim * 2 * num_heads + attention_dim * num_heads * 2,
                    )
                ).normal_(mean=0, std=0.02),
            )
        else:
            raise ValueError(f"Unknown linear_config {self._linear_config}")
        self._linear_activation: str = linear_activation
        self._concat_ua: bool = concat_ua
        self._o = torch.nn.Linear(
            in_features=linear_hidden_dim * num_heads * (3 if concat_ua else 1),
            out_features=embedding_dim,
        )
        torch.nn.init.xavier_uniform_(self._o.weight)
        self._eps: float = epsilon

    def _norm_input(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, normalized_shape=[self._embedding_dim], eps=self._eps)

    def _norm_attn_output(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, normalized_shape=[self._linear_dim * self._num_heads], eps=self._eps)

    def forward(
        self,
        x: torch.Tensor,
        x_offsets: torch.Tensor,
        all_timestamps: torch.Tensor | None,
        invalid_attn_mask: torch.Tensor,
    ):
        """
        Args:
            x: (\\sum_i N_i, D) x float.
            x_offsets: (B + 1) x int32.
            all_timestamps: optional (B, N) x int64.
            invalid_attn_mask: (B, N, N) x float, each element in {0, 1}.
        Returns:
            x' = f(x), (\\sum_i N_i, D) x float.
        """
        normed_x = self._norm_input(x)

        if self._linear_config == "uvqk":
            batched_mm_output = torch.mm(normed_x, self._uvqk)
            if self._linear_activation == "silu":
                batched_mm_output = F.silu(batched_mm_output)
            elif self._linear_activation == "none":
                batched_mm_output = batched_mm_output
            u, v, q, k = torch.split(
                batched_mm_output,
                [
                    self._linear_dim * self._num_heads,
                    self._linear_dim * self._num_heads,
                    self._attention_dim * self._num_heads,
                    self._attention_dim * self._num_heads,
                ],
                dim=1,
            )
        else:
            raise ValueError(f"Unknown self._linear_config {self._linear_config}")

        if self._normalization == "rel_bias" or self._normalization == "hstu_rel_bias":
            assert self._rel_attn_bias is not None
            attn_output, padded_q, padded_k = _hstu_attention_maybe_from_cache(
                num_heads=self._num_heads,
                attention_dim=self._attention_dim,
                linear_dim=self._linear_dim,
                q=q,
                k=k,
                v=v,
                x_offsets=x_offsets,
                all_timestamps=all_timestamps,
                invalid_attn_mask=invalid_attn_mask,
                rel_attn_bias=self._rel_attn_bias,
            )
        else:
            raise ValueError(f"Unknown normalization method {self._normalization}")

        if self._concat_ua:
            a = self._norm_attn_output(attn_output)
            o_input = torch.cat([u, a, u * a], dim=-1)
        else:
            o_input = u * self._norm_attn_output(attn_output)

        new_outputs = (
            self._o(
                F.dropout(
                    o_input,
                    p=self._dropout_ratio,
                    training=self.training,
                )
            )
            + x
        )

        return new_outputs, (v, padded_q, padded_k, new_outputs)


class HSTUJagged(torch.nn.Module):
    def __init__(self, modules: list[SequentialTransductionUnitJagged]) -> None:
        super().__init__()

        self._attention_layers: torch.nn.ModuleList = torch.nn.ModuleList(modules=modules)

    def jagged_forward(
        self,
        x: torch.Tensor,
        x_offsets: torch.Tensor,
        all_timestamps: torch.Tensor | None,
        invalid_attn_mask: torch.Tensor,
    ) -> torch.Tensor:
        for layer in self._attention_layers:
            x, _ = layer(
                x=x,
                x_offsets=x_offsets,
                all_timestamps=all_timestamps,
                invalid_attn_mask=invalid_attn_mask,
            )
        return x

    def forward(
        self,
        x: torch.Tensor,
        x_offsets: torch.Tensor,
        all_timestamps: torch.Tensor | None,
        invalid_attn_mask: torch.Tensor,
    ) -> torch.Tensor:
        """
        Args:
            x: (B, N, D) x float.
            x_offsets: (B + 1) x int32.
            all_timestamps: (B, 1 + N) x int64
            invalid_attn_mask: (B, N, N) x float, each element in {0, 1}.
        Returns:
            x' = f(x), (B, N, D) x float
        """
        if len(x.size()) == 3:
            x = dense_to_jagged(x, [x_offsets])[0]

        jagged_x = self.jagged_forward(
            x=x,
            x_offsets=x_offsets,
            all_timestamps=all_timestamps,
            invalid_attn_mask=invalid_attn_mask,
        )
        y = jagged_to_padded_dense(
            values=jagged_x,
            offsets=[x_offsets],
            max_lengths=[invalid_attn_mask.size(1)],
            padding_value=0.0,
        )
        return y


class L2NormEmbeddingPostprocessor(torch.nn.Module):
    def __init__(self, embedding_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self._embedding_dim: int = embedding_dim
        self._eps: float = eps

    def forward(self, output_embeddings: torch.Tensor) -> torch.Tensor:
        output_embeddings = output_embeddings[..., : self._embedding_dim]
        return output_embeddings / torch.clamp(
            torch.linalg.norm(output_embeddings, ord=None, dim=-1, keepdim=True),
            min=self._eps,
        )


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        max_output_len = GR_OUTPUT_LENGTH + 1
        self._hstu = HSTUJagged(
            modules=[
                SequentialTransductionUnitJagged(
                    embedding_dim=EMBEDDING_DIM,
                    linear_hidden_dim=DV,
                    attention_dim=DQK,
                    normalization="rel_bias",
                    linear_config="uvqk",
                    linear_activation="silu",
                    num_heads=NUM_HEADS,
                    relative_attention_bias_module=RelativeBucketedTimeAndPositionBasedBias(
                        max_seq_len=MAX_SEQUENCE_LEN + max_output_len,  # accounts for next item.
                        num_buckets=128,
                        bucketization_fn=lambda x: (torch.log(torch.abs(x).clamp(min=1)) / 0.301).long(),
                    ),
                    dropout_ratio=0.2,
                    attn_dropout_ratio=0.0,
                    concat_ua=False,
                )
                for _ in range(NUM_BLOCKS)
            ],
        )
        # causal forward, w/ +1 for padding.
        self.register_buffer(
            "_attn_mask",
            torch.triu(
                torch.ones(
                    (
                        MAX_SEQUENCE_LEN + max_output_len,
                        MAX_SEQUENCE_LEN + max_output_len,
                    ),
                    dtype=torch.bool,
                ),
                diagonal=1,
            ),
        )
        self._output_postproc = L2NormEmbeddingPostprocessor(embedding_dim=EMBEDDING_DIM, eps=1e-6)
        with torch.no_grad():  # trained relative-attention biases
            for m in self.modules():
                if isinstance(m, RelativeBucketedTimeAndPositionBasedBias):
                    m._ts_w.normal_(0.0, 0.5)
                    m._pos_w.normal_(0.0, 0.5)
        self.eval()

    def forward(self, user_embeddings, past_lengths, timestamps):
        # HSTU.generate_user_embeddings after the input preprocessor
        float_dtype = user_embeddings.dtype
        # torch.ops.fbgemm.asynchronous_complete_cumsum(past_lengths)
        x_offsets = F.pad(torch.cumsum(past_lengths, dim=0), [1, 0])
        user_embeddings = self._hstu(
            x=user_embeddings,
            x_offsets=x_offsets,
            all_timestamps=timestamps,
            invalid_attn_mask=1.0 - self._attn_mask.to(float_dtype),
        )
        return self._output_postproc(user_embeddings)


def get_inputs():
    n = MAX_SEQUENCE_LEN + GR_OUTPUT_LENGTH + 1
    # MovieLens-20M rating times in seconds: a start in 1996..2015, then sessions of ratings
    # seconds to minutes apart, with gaps of days to weeks between sessions
    start = torch.randint(820_000_000, 1_420_000_000, (BATCH, 1))
    gaps = torch.randint(0, 600, (BATCH, n)) + torch.randint(0, 3_000_000, (BATCH, n)) * (
        torch.rand(BATCH, n) < 0.1
    )
    timestamps = start + torch.cumsum(gaps, dim=1)
    past_lengths = torch.full((BATCH,), n, dtype=torch.int64)
    return [torch.randn(BATCH, n, EMBEDDING_DIM), past_lengths, timestamps]


def get_init_inputs():
    return []
