"""Behavior Sequence Transformer (BST, Alibaba, Chen et al. 2019, "Behavior Sequence
Transformer for E-commerce Recommendation in Alibaba"): the full ranking (CTR)
network of this industrial recommender, as the paper describes it. There is no official
PyTorch code; this follows the paper's architecture in the style of common PyTorch
re-implementations.

The user's last 20 clicked items plus the target item (item_id + category_id
embeddings, concatenated, plus a time-difference position embedding) go through one
transformer layer: multi-head self-attention (8 heads), residual + LayerNorm, a
LeakyReLU feed-forward network, residual + LayerNorm. The transformer outputs of all
21 positions are flattened, concatenated with the embeddings of 8 "other features"
(user profile, context, cross features) and fed to an MLP 1024-512-256 with LeakyReLU
and a sigmoid output giving the click probability.
Shapes: ranking-service batch of 4096 (user, candidate) pairs, sequence 20 + target,
item embedding 64, category embedding 32 (model width 96), 1M-item vocabulary.
Rough cost: ~45 GFLOP, ~300 MB of embedding tables.

Departures: the paper concatenates the position feature; here the position
(time-difference bucket) embedding is added to the 96-d item representation as in
most re-implementations; dropout (0.2 in the paper) is inactive in eval. Linear weights
use xavier_normal with zero bias (as FuxiCTR / DeepCTR-style code does), embeddings
normal(0, 0.05).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4096
SEQ_LEN = 20
NUM_ITEMS = 1000000
NUM_CATES = 10000
ITEM_DIM = 64
CATE_DIM = 32
D_MODEL = ITEM_DIM + CATE_DIM
NUM_HEADS = 8
FFN_DIM = 4 * D_MODEL
NUM_POS_BUCKETS = 64
NUM_OTHER_FIELDS = 8
OTHER_VOCAB = 100000
OTHER_DIM = 16
MLP_DIMS = [1024, 512, 256]
DROPOUT = 0.2
LEAKY_SLOPE = 0.01
EMB_STD = 0.05


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout):
        super().__init__()
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, L, _ = x.shape
        q = self.W_q(x).view(B, L, self.num_heads, self.d_head).transpose(1, 2)
        k = self.W_k(x).view(B, L, self.num_heads, self.d_head).transpose(1, 2)
        v = self.W_v(x).view(B, L, self.num_heads, self.d_head).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_head)
        attn = F.softmax(scores, dim=-1)
        attn = self.dropout(attn)
        out = torch.matmul(attn, v)
        out = out.transpose(1, 2).contiguous().view(B, L, self.d_model)
        return self.W_o(out)


class TransformerLayer(nn.Module):
    def __init__(self, d_model, num_heads, ffn_dim, dropout):
        super().__init__()
        self.attn = MultiHeadSelfAttention(d_model, num_heads, dropout)
        self.ln1 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(
            nn.Linear(d_model, ffn_dim),
            nn.LeakyReLU(LEAKY_SLOPE),
            nn.Linear(ffn_dim, d_model),
        )
        self.ln2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, s):
        # S' = LayerNorm(S + Dropout(MH(S)))
        s = self.ln1(s + self.dropout1(self.attn(s)))
        # F = LayerNorm(S' + Dropout(LeakyReLU(S'W1 + b1)W2 + b2))
        s = self.ln2(s + self.dropout2(self.ffn(s)))
        return s


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.item_emb = nn.Embedding(NUM_ITEMS, ITEM_DIM)
        self.cate_emb = nn.Embedding(NUM_CATES, CATE_DIM)
        self.pos_emb = nn.Embedding(NUM_POS_BUCKETS, D_MODEL)
        self.other_embs = nn.ModuleList(
            [nn.Embedding(OTHER_VOCAB, OTHER_DIM) for _ in range(NUM_OTHER_FIELDS)]
        )
        self.transformer = TransformerLayer(D_MODEL, NUM_HEADS, FFN_DIM, DROPOUT)
        mlp = []
        in_dim = (SEQ_LEN + 1) * D_MODEL + NUM_OTHER_FIELDS * OTHER_DIM
        for h in MLP_DIMS:
            mlp += [nn.Linear(in_dim, h), nn.LeakyReLU(LEAKY_SLOPE), nn.Dropout(DROPOUT)]
            in_dim = h
        mlp.append(nn.Linear(in_dim, 1))
        self.mlp = nn.Sequential(*mlp)
        for m in self.modules():
            if isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=EMB_STD)
            elif isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                nn.init.zeros_(m.bias)
        self.eval()

    def forward(
        self, seq_item_ids, seq_cate_ids, target_item_id, target_cate_id, pos_bucket_ids, other_feature_ids
    ):
        # behaviour sequence + target item: (B, L+1)
        item_ids = torch.cat([seq_item_ids, target_item_id.unsqueeze(1)], dim=1)
        cate_ids = torch.cat([seq_cate_ids, target_cate_id.unsqueeze(1)], dim=1)
        seq = torch.cat([self.item_emb(item_ids), self.cate_emb(cate_ids)], dim=-1)
        seq = seq + self.pos_emb(pos_bucket_ids)
        seq = self.transformer(seq)
        seq = seq.flatten(start_dim=1)
        others = [emb(other_feature_ids[:, i]) for i, emb in enumerate(self.other_embs)]
        x = torch.cat([seq] + others, dim=1)
        logit = self.mlp(x)
        return torch.sigmoid(logit).squeeze(-1)


def get_inputs():
    seq_item_ids = torch.randint(0, NUM_ITEMS, (BATCH, SEQ_LEN))
    seq_cate_ids = torch.randint(0, NUM_CATES, (BATCH, SEQ_LEN))
    target_item_id = torch.randint(0, NUM_ITEMS, (BATCH,))
    target_cate_id = torch.randint(0, NUM_CATES, (BATCH,))
    # time-difference buckets: older behaviours get larger buckets, the target gets 0
    pos = torch.sort(torch.randint(1, NUM_POS_BUCKETS, (BATCH, SEQ_LEN)), dim=1, descending=True).values
    pos_bucket_ids = torch.cat([pos, torch.zeros(BATCH, 1, dtype=torch.long)], dim=1)
    other_feature_ids = torch.randint(0, OTHER_VOCAB, (BATCH, NUM_OTHER_FIELDS))
    return [seq_item_ids, seq_cate_ids, target_item_id, target_cate_id, pos_bucket_ids, other_feature_ids]


def get_init_inputs():
    return []
