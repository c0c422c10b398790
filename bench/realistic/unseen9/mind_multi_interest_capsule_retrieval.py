"""MIND (Multi-Interest Network with Dynamic routing, Alibaba/Tmall, Li et al. 2019)
user tower for candidate retrieval in a recommender system: the multi-interest
extractor (behaviour-to-interest capsule dynamic routing) as the ComiRec authors'
reference implementation writes it (THUDM/ComiRec, src/model.py, CapsuleNetwork with
bilinear_type=0 i.e. MIND, 3 routing iterations, stop-gradient routing, relu 'proj'
layer), translated from TensorFlow to PyTorch op by op (tf.tile -> repeat,
tf.where -> torch.where, tf.nn.softmax(axis=1) -> softmax(dim=1)).

Serving use case: embed a batch of users' click histories and output K=4 interest
vectors per user, which are then used for ANN search over item embeddings.
Shapes: batch 8192 users x 50 history items, embedding 64, 4 interests,
1M-item vocabulary (Taobao scale); variable history lengths via a 0/1 mask.
Output: (8192, 4, 64). Rough cost: ~5 GFLOP, memory-bound (~0.5 GB intermediates).

Departures: MIND/ComiRec draw the initial routing logits from a fresh
truncated_normal(stddev=1) on every call; to keep forward deterministic they are drawn
once in __init__ (trunc_normal, std 1) as a (1, K, L) buffer and expanded over the
batch. The label-aware attention over the target item (training only) is not included.
Embeddings normal(0, 0.5) (trained-embedding scale, so capsules are not squashed
to ~0); dense layers use glorot_uniform
and zero bias, TensorFlow's tf.layers.dense defaults. Interest capsules are squashed
to norm < 1, so output values are O(0.1).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8192
SEQ_LEN = 50
EMBED_DIM = 64
HIDDEN_SIZE = 64
NUM_INTEREST = 4
NUM_ITEMS = 1000000
ROUTING_ITERS = 3
EMB_STD = 0.5


class CapsuleNetwork(nn.Module):
    def __init__(self, dim, seq_len, bilinear_type=0, num_interest=4, hard_readout=True, relu_layer=True):
        super().__init__()
        self.dim = dim
        self.seq_len = seq_len
        self.bilinear_type = bilinear_type
        self.num_interest = num_interest
        self.hard_readout = hard_readout
        self.relu_layer = relu_layer
        self.stop_grad = True
        if self.bilinear_type == 0:
            # tf.layers.dense(item_his_emb, self.dim, activation=None, bias_initializer=None)
            self.bilinear = nn.Linear(dim, dim, bias=False)
        else:
            raise NotImplementedError
        if self.relu_layer:
            self.proj = nn.Linear(dim, dim)
        # tf.layers.dense default kernel initializer is glorot_uniform
        nn.init.xavier_uniform_(self.bilinear.weight)
        if self.relu_layer:
            nn.init.xavier_uniform_(self.proj.weight)
            nn.init.zeros_(self.proj.bias)
        capsule_weight_init = torch.empty(1, num_interest, seq_len)
        nn.init.trunc_normal_(capsule_weight_init, std=1.0, a=-2.0, b=2.0)
        self.register_buffer("capsule_weight_init", capsule_weight_init)

    def forward(self, item_his_emb, mask):
        batch_size = item_his_emb.shape[0]
        if self.bilinear_type == 0:
            item_emb_hat = self.bilinear(item_his_emb)
            item_emb_hat = item_emb_hat.repeat(1, 1, self.num_interest)

        item_emb_hat = torch.reshape(item_emb_hat, (-1, self.seq_len, self.num_interest, self.dim))
        item_emb_hat = item_emb_hat.permute(0, 2, 1, 3)
        item_emb_hat = torch.reshape(item_emb_hat, (-1, self.num_interest, self.seq_len, self.dim))

        if self.stop_grad:
            item_emb_hat_iter = item_emb_hat.detach()
        else:
            item_emb_hat_iter = item_emb_hat

        capsule_weight = self.capsule_weight_init.expand(batch_size, -1, -1).detach()

        for i in range(ROUTING_ITERS):
            atten_mask = mask.unsqueeze(1).repeat(1, self.num_interest, 1)
            paddings = torch.zeros_like(atten_mask)

            capsule_softmax_weight = F.softmax(capsule_weight, dim=1)
            capsule_softmax_weight = torch.where(atten_mask == 0, paddings, capsule_softmax_weight)
            capsule_softmax_weight = capsule_softmax_weight.unsqueeze(2)

            if i < 2:
                interest_capsule = torch.matmul(capsule_softmax_weight, item_emb_hat_iter)
                cap_norm = torch.sum(torch.square(interest_capsule), -1, keepdim=True)
                scalar_factor = cap_norm / (1 + cap_norm) / torch.sqrt(cap_norm + 1e-9)
                interest_capsule = scalar_factor * interest_capsule

                delta_weight = torch.matmul(item_emb_hat_iter, interest_capsule.permute(0, 1, 3, 2))
                delta_weight = torch.reshape(delta_weight, (-1, self.num_interest, self.seq_len))
                capsule_weight = capsule_weight + delta_weight
            else:
                interest_capsule = torch.matmul(capsule_softmax_weight, item_emb_hat)
                cap_norm = torch.sum(torch.square(interest_capsule), -1, keepdim=True)
                scalar_factor = cap_norm / (1 + cap_norm) / torch.sqrt(cap_norm + 1e-9)
                interest_capsule = scalar_factor * interest_capsule

        interest_capsule = torch.reshape(interest_capsule, (-1, self.num_interest, self.dim))

        if self.relu_layer:
            interest_capsule = F.relu(self.proj(interest_capsule))
        return interest_capsule


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mid_embeddings_var = nn.Embedding(NUM_ITEMS, EMBED_DIM)
        nn.init.normal_(self.mid_embeddings_var.weight, std=EMB_STD)
        self.capsule_network = CapsuleNetwork(
            HIDDEN_SIZE, SEQ_LEN, bilinear_type=0, num_interest=NUM_INTEREST, relu_layer=True
        )
        self.eval()

    def forward(self, mid_his_batch, mask):
        item_his_eb = self.mid_embeddings_var(mid_his_batch)
        item_his_eb = item_his_eb * torch.reshape(mask, (-1, SEQ_LEN, 1))
        user_eb = self.capsule_network(item_his_eb, mask)
        return user_eb


def get_inputs():
    mid_his_batch = torch.randint(0, NUM_ITEMS, (BATCH, SEQ_LEN))
    lengths = torch.randint(5, SEQ_LEN + 1, (BATCH, 1))
    mask = (torch.arange(SEQ_LEN).unsqueeze(0) < lengths).to(torch.float32)
    mid_his_batch = mid_his_batch * mask.long()
    return [mid_his_batch, mask]


def get_init_inputs():
    return []
