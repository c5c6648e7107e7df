"""Reference answers of notebooks/02_mask_construction.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""

__all__ = ["my_sequence"]


def my_sequence(chat, record):
    """The first prompt (not trained), then per turn: the sampled ids (trained), the <|im_end|> the template adds
    when the reply did not end with one (not trained: nobody sampled it), and, if the environment's answer was
    appended, the rest of the scaffolding, the observation and the next generation header (not trained)."""
    ids, mask = list(record["prompt"]), [0] * len(record["prompt"])
    for turn in record["turns"]:
        sampled = turn["sampled"]
        ids += sampled
        mask += [1] * len(sampled)
        if not sampled or sampled[-1] != chat.end_of_turn_id:
            ids.append(chat.end_of_turn_id)
            mask.append(0)
        if turn["observation"] is not None:
            answer = (chat.encode(chat.after_reply) + chat.encode(turn["observation"])
                      + chat.encode(chat.generation_header))
            ids += answer
            mask += [0] * len(answer)
    return ids, mask
