"""The Beam Retrieval scorer as the official ``Retriever`` holds it: a DeBERTa-v2/v3
encoder and two bare ``Linear(H, 2)`` heads on the CLS state (``hop_classifier_layer``
for hop 1, ``hop_n_classifier_layer`` for later hops). Shared by make_goldens.py and
make_beam_goldens.py."""

from __future__ import annotations

import torch
from torch import nn
from transformers import DebertaV2Config
from transformers.models.deberta_v2 import modeling_deberta_v2 as hf


class BeamRetriever(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.encoder = hf.DebertaV2Model(config)
        self.hop_classifier_layer = nn.Linear(config.hidden_size, 2)
        self.hop_n_classifier_layer = nn.Linear(config.hidden_size, 2)

    def forward(self, input_ids, attention_mask, token_type_ids):
        """Hidden states and both heads' logits (the encoder golden's view)."""
        h = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        cls = h[:, 0]
        return h, {
            "hop1": self.hop_classifier_layer(cls),
            "hop_n": self.hop_n_classifier_layer(cls),
        }

    @torch.no_grad()
    def cls_logits(self, input_ids, attention_mask, head: str):
        """Logits of one head (named by its attribute) on the CLS state (the search's view)."""
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return getattr(self, head)(h[:, 0, :])
