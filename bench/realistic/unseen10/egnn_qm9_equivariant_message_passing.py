"""E(n)-Equivariant Graph Neural Network (EGNN, Satorras, Hoogeboom & Welling, ICML 2021) -- full EGNN stack on a
batch of QM9-sized molecules (science: molecular property prediction).

Model / block: EGNN = embedding_in -> 7 x E_GCL -> embedding_out. Each E_GCL (equivariant graph conv layer) on the
fully connected intra-molecule graph:
    radial_ij = ||x_i - x_j||^2
    m_ij  = SiLU(Lin(SiLU(Lin([h_i, h_j, radial_ij]))))       edge MLP (257 -> 128 -> 128)
    m_ij *= sigmoid(Lin(m_ij))                                  attention gate
    x_i  += mean_j (x_i - x_j) * coord_mlp(m_ij)                coord MLP (128 -> 128 -> 1), scatter-mean over edges
    h_i  += node_mlp([h_i, sum_j m_ij])                         node MLP (256 -> 128 -> 128), scatter-sum over edges
Gathers h[row], h[col], x[row], x[col] and scatter_add_ (unsorted_segment_sum / _mean) as in the official code.
Upstream code followed: vgsatorras/egnn models/egnn_clean/egnn_clean.py (E_GCL, EGNN, unsorted_segment_sum,
unsorted_segment_mean); hyper-parameters of the paper's QM9 setup (hidden 128, 7 layers, attention on,
15 input node features = one-hot of H/C/N/O/F x charge powers 0..2).
Use case: batched inference over 256 molecules with 9-29 atoms each (QM9 size range, mean 19), fully connected
within each molecule, no padding.
Shapes: h [N=4854, 15] fp32, x [4854, 3] fp32 (Angstrom), edges [2, E=96572] int64
-> (h_out [4854, 128], x_out [4854, 3]) fp32.
Rough FLOPs: per layer and edge 2*(257*128 + 128*128 + 128*128 + 128*1 + 128*1) = 131k -> 7 * 96572 * 131k
= 89 GFLOP (edge MLPs) + ~3 GFLOP node MLPs -> ~92 GFLOP (~2 ms of GEMM), plus per layer ~100 MB edge-feature
gathers/concat and scatter-adds over 97k edges.

Departures:
- Edge index is one [2, E] tensor (upstream passes a [rows, cols] list); edge_attr / node_attr are None.
- Init: nn.Linear defaults as upstream, except the last coord-MLP layer: xavier_uniform gain 1.0 instead of 0.001
  (the training init makes coordinate updates ~1e-4 A, i.e. x_out == x_in; here atoms move ~0.035 A rms).
- Fixed molecule-size pattern (9 + (5i mod 21) atoms) so shapes are deterministic; random coordinates
  (std 1.2 A) instead of real conformers.
"""

import torch
import torch.nn as nn

NUM_MOLECULES = 256
IN_NODE_NF = 15
HIDDEN_NF = 128
OUT_NODE_NF = 128
N_LAYERS = 7
MOL_SIZES = [9 + (5 * i) % 21 for i in range(NUM_MOLECULES)]


def unsorted_segment_sum(data, segment_ids, num_segments):
    result_shape = (num_segments, data.size(1))
    result = data.new_full(result_shape, 0)  # Init empty result tensor.
    segment_ids = segment_ids.unsqueeze(-1).expand(-1, data.size(1))
    result.scatter_add_(0, segment_ids, data)
    return result


def unsorted_segment_mean(data, segment_ids, num_segments):
    result_shape = (num_segments, data.size(1))
    segment_ids = segment_ids.unsqueeze(-1).expand(-1, data.size(1))
    result = data.new_full(result_shape, 0)  # Init empty result tensor.
    count = data.new_full(result_shape, 0)
    result.scatter_add_(0, segment_ids, data)
    count.scatter_add_(0, segment_ids, torch.ones_like(data))
    return result / count.clamp(min=1)


class E_GCL(nn.Module):
    """E(n) Equivariant Convolutional Layer"""

    def __init__(
        self,
        input_nf,
        output_nf,
        hidden_nf,
        edges_in_d=0,
        act_fn=nn.SiLU(),
        residual=True,
        attention=False,
        normalize=False,
        coords_agg="mean",
        tanh=False,
    ):
        super().__init__()
        input_edge = input_nf * 2
        self.residual = residual
        self.attention = attention
        self.normalize = normalize
        self.coords_agg = coords_agg
        self.tanh = tanh
        self.epsilon = 1e-8
        edge_coords_nf = 1

        self.edge_mlp = nn.Sequential(
            nn.Linear(input_edge + edge_coords_nf + edges_in_d, hidden_nf),
            act_fn,
            nn.Linear(hidden_nf, hidden_nf),
            act_fn,
        )

        self.node_mlp = nn.Sequential(
            nn.Linear(hidden_nf + input_nf, hidden_nf), act_fn, nn.Linear(hidden_nf, output_nf)
        )

        layer = nn.Linear(hidden_nf, 1, bias=False)
        torch.nn.init.xavier_uniform_(layer.weight, gain=1.0)  # departure: upstream gain=0.001

        coord_mlp = []
        coord_mlp.append(nn.Linear(hidden_nf, hidden_nf))
        coord_mlp.append(act_fn)
        coord_mlp.append(layer)
        if self.tanh:
            coord_mlp.append(nn.Tanh())
        self.coord_mlp = nn.Sequential(*coord_mlp)

        if self.attention:
            self.att_mlp = nn.Sequential(nn.Linear(hidden_nf, 1), nn.Sigmoid())

    def edge_model(self, source, target, radial, edge_attr):
        if edge_attr is None:  # Unused.
            out = torch.cat([source, target, radial], dim=1)
        else:
            out = torch.cat([source, target, radial, edge_attr], dim=1)
        out = self.edge_mlp(out)
        if self.attention:
            att_val = self.att_mlp(out)
            out = out * att_val
        return out

    def node_model(self, x, edge_index, edge_attr, node_attr):
        row, _col = edge_index[0], edge_index[1]
        agg = unsorted_segment_sum(edge_attr, row, num_segments=x.size(0))
        if node_attr is not None:
            agg = torch.cat([x, agg, node_attr], dim=1)
        else:
            agg = torch.cat([x, agg], dim=1)
        out = self.node_mlp(agg)
        if self.residual:
            out = x + out
        return out, agg

    def coord_model(self, coord, edge_index, coord_diff, edge_feat):
        row, _col = edge_index[0], edge_index[1]
        trans = coord_diff * self.coord_mlp(edge_feat)
        if self.coords_agg == "sum":
            agg = unsorted_segment_sum(trans, row, num_segments=coord.size(0))
        elif self.coords_agg == "mean":
            agg = unsorted_segment_mean(trans, row, num_segments=coord.size(0))
        else:
            raise Exception("Wrong coords_agg parameter")
        coord = coord + agg
        return coord

    def coord2radial(self, edge_index, coord):
        row, col = edge_index[0], edge_index[1]
        coord_diff = coord[row] - coord[col]
        radial = torch.sum(coord_diff**2, 1).unsqueeze(1)

        if self.normalize:
            norm = torch.sqrt(radial).detach() + self.epsilon
            coord_diff = coord_diff / norm

        return radial, coord_diff

    def forward(self, h, edge_index, coord, edge_attr=None, node_attr=None):
        row, col = edge_index[0], edge_index[1]
        radial, coord_diff = self.coord2radial(edge_index, coord)

        edge_feat = self.edge_model(h[row], h[col], radial, edge_attr)
        coord = self.coord_model(coord, edge_index, coord_diff, edge_feat)
        h, agg = self.node_model(h, edge_index, edge_feat, node_attr)

        return h, coord, edge_attr


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden_nf = HIDDEN_NF
        self.n_layers = N_LAYERS
        act_fn = nn.SiLU()
        self.embedding_in = nn.Linear(IN_NODE_NF, self.hidden_nf)
        self.embedding_out = nn.Linear(self.hidden_nf, OUT_NODE_NF)
        for i in range(0, N_LAYERS):
            self.add_module(
                f"gcl_{i}",
                E_GCL(
                    self.hidden_nf,
                    self.hidden_nf,
                    self.hidden_nf,
                    edges_in_d=0,
                    act_fn=act_fn,
                    residual=True,
                    attention=True,
                    normalize=False,
                    tanh=False,
                ),
            )
        self.eval()

    def forward(self, h, x, edges):
        edge_attr = None
        h = self.embedding_in(h)
        for i in range(0, self.n_layers):
            h, x, _ = self._modules[f"gcl_{i}"](h, edges, x, edge_attr=edge_attr)
        h = self.embedding_out(h)
        return h, x


def get_inputs():
    n_total = sum(MOL_SIZES)
    # atom types H, C, N, O, F with QM9-like frequencies; node features = one_hot x (charge / 9) ** {0, 1, 2}
    u = torch.rand(n_total)
    atom_type = (u > 0.51).long() + (u > 0.86).long() + (u > 0.92).long() + (u > 0.995).long()
    one_hot = (atom_type.unsqueeze(-1) == torch.arange(5).unsqueeze(0)).float()
    charges = torch.tensor([1.0, 6.0, 7.0, 8.0, 9.0])[atom_type].unsqueeze(-1)
    h = torch.cat([one_hot * (charges / 9.0) ** p for p in range(3)], dim=1)
    x = torch.randn(n_total, 3) * 1.2
    rows, cols = [], []
    offset = 0
    for n in MOL_SIZES:
        i = torch.arange(n).repeat_interleave(n - 1)
        k = torch.arange(1, n).repeat(n)
        rows.append(offset + i)
        cols.append(offset + (i + k) % n)
        offset += n
    edges = torch.stack([torch.cat(rows), torch.cat(cols)], dim=0)
    return [h.float(), x.float(), edges.long()]


def get_init_inputs():
    return []
