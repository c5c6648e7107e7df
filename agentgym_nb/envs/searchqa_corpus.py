"""The offline SearchQA default: a knowledge base of fictional entities, and questions over it, from a seed.

    paths = build()           # outputs/data/searchqa/fictional-v1-seed0/{corpus,test,train}.jsonl, built once
    world = generate(seed=0)  # the same in memory: World(passages, test, train)

Entities are people, cities, countries, organisations and works (novels, films, albums, paintings). Every name is
built from syllables and every fact is drawn at random, so no model can know an answer from pre-training: it has
to search. Each entity has one passage of a few sentences, written Wikipedia-style, and each relation between two
entities is stated in exactly one passage, the subject's ("Zorvath Press is a publishing house based in Tarsk. It
was founded in 1873 by Kalvor Dunmeth."). That makes question difficulty a matter of construction:
  - 1-hop: the answer is a fact in the subject's passage ("Who founded Zorvath Press?"): one search.
  - 2-hop: the answer is a fact of an entity reached through the subject ("Where was the founder of Zorvath Press
    born?"): search the subject, read the bridge entity's name, search it. A 2-hop question is kept only if no
    passage that mentions the subject contains the answer, so one search cannot reveal it.
Each entity is the subject of at most one question, so test questions share no subject with train questions.

Files (Search-R1 / FlashRAG layout, what `SearchQA(corpus=, test=, train=)` also reads for the real data):
  corpus.jsonl  {"id": "<row>", "contents": "\\"<title>\\"\\n<text>"}, one entity per row
  test.jsonl, train.jsonl  {"id", "question", "golden_answers": [answer], "data_source": "1-hop" | "2-hop",
                            "expert": [whole replies solving it], "gold_passages": [corpus row of each search]}
Only Python's `random.Random(seed)` drives the draws, over lists and dicts (never iterating a set), so the files
are the same bytes on every machine and process, whatever PYTHONHASHSEED.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import string
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import default_outputs_dir

VERSION = 1  # bump when the generated text changes, so stale caches are rebuilt
SIZES = {"country": 120, "city": 3000, "person": 8000, "org": 4000, "work": 6000}  # 21,120 passages
N_TEST, N_TRAIN = 500, 2500  # each half 1-hop, half 2-hop

ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kr", "tr", "th",
          "st", "sh", "h"]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ei", "ou"]
CODAS = ["", "", "", "", "n", "r", "l", "s", "m", "th", "nd", "x"]
# no name may contain these (syllables can spell rude or loaded words)
BLOCKED = ("sex", "nig", "fag", "cum", "tit", "ass", "rap", "shit", "porn", "dick", "cock", "fuk", "kil", "nazi",
           "jew", "gay", "hell", "damn", "piss", "slut", "whor", "twat", "cunt", "anal", "anus", "poo", "hit", "bum",
           "god", "jesus", "allah", "kkk", "isis", "gun", "drug", "dead", "die")
OCCUPATIONS = {"novelist": 12, "film director": 10, "musician": 10, "painter": 8, "engineer": 6, "physician": 6,
               "architect": 6, "chemist": 5, "lawyer": 5, "economist": 5, "journalist": 5, "historian": 5,
               "botanist": 4, "mathematician": 4, "diplomat": 5}
# org kind -> (how the passage describes it, weight)
ORG_KINDS = {"company": ("{industry} company", 50), "press": ("publishing house", 12),
             "pictures": ("film studio", 10), "records": ("record label", 10), "university": ("university", 18)}
ORG_SUFFIX = {"company": ["Industries", "Group", "Holdings", "Works", "Trading Company"], "press": ["Press", "Books"],
              "pictures": ["Pictures", "Studios", "Films"], "records": ["Records", "Music"],
              "university": ["University", "Institute of Technology", "College"]}
INDUSTRIES = ["shipping", "mining", "textile", "railway", "insurance", "brewing", "steel", "glassmaking",
              "shipbuilding", "software", "pharmaceutical", "telegraph", "timber", "chocolate", "porcelain"]
# work kind -> (creator occupation, creator role, past tense, "<verb>ed by", released verb, publisher org kind)
WORK_KINDS = {"novel": ("novelist", "author", "wrote", "written", "published", "press"),
              "film": ("film director", "director", "directed", "directed", "released", "pictures"),
              "album": ("musician", "artist", "recorded", "recorded", "released", "records"),
              "painting": ("painter", "painter", "painted", "painted", "completed", None)}
WORK_SHARE = {"novel": 2000, "film": 1500, "album": 1500, "painting": 1000}
TITLE_PATTERNS = {"novel": ["The {w} Letters", "The {w} Inheritance", "A Winter in {w}", "The Daughters of {w}",
                            "{w}", "The Last Days of {w}"],
                  "film": ["{w} Rising", "The {w} Affair", "Night Train to {w}", "{w}", "Return to {w}"],
                  "album": ["{w}", "Songs of {w}", "{w} Blue", "Echoes of {w}", "The {w} Sessions"],
                  "painting": ["View of {w}", "The {w} Garden", "Portrait of {w}", "{w} at Dusk"]}
FEATURES = ["harbour", "old bridges", "annual lantern festival", "cathedral", "covered markets", "botanical garden",
            "salt marshes", "clock tower", "wine cellars", "canal network", "university quarter", "hot springs"]
PRAISE = ["favourable", "mixed", "enthusiastic", "lukewarm", "glowing"]

# A relation: its subject kind, its object kind (None: a literal such as a year), how a question asks for it about
# "{x}", how a 2-hop question names its object through subject "{s}", and how the expert states it ("{x}", "{a}").
# Work relations are worded per work kind, see `work_wording`.
RELATIONS = {
    "birthplace": ("person", "city", ["Where was {x} born?", "In which city was {x} born?"],
                   ["the birthplace of {s}", "the city where {s} was born"], "{x} was born in {a}."),
    "birth_year": ("person", None, ["In what year was {x} born?", "When was {x} born?"], [], "{x} was born in {a}."),
    "employer": ("person", "org", ["Which organisation does {x} work for?", "Who is the employer of {x}?"],
                 ["the employer of {s}", "the organisation {s} works for"], "{x} works for {a}."),
    "alma_mater": ("person", "org", ["Which university did {x} attend?", "Where did {x} study?"],
                   ["the university {s} attended", "the university where {s} studied"], "{x} studied at {a}."),
    "founder": ("org", "person", ["Who founded {x}?", "Who was the founder of {x}?"],
                ["the founder of {s}", "the person who founded {s}"], "{x} was founded by {a}."),
    "founded": ("org", None, ["In what year was {x} founded?", "When was {x} founded?"], [],
                "{x} was founded in {a}."),
    "base": ("org", "city", ["In which city is {x} based?", "Where is {x} based?"],
             ["the city where {s} is based", "the home city of {s}"], "{x} is based in {a}."),
    "country": ("city", "country", ["In which country is {x}?", "Which country is {x} located in?"],
                ["the country where {s} is located", "the country {s} belongs to"], "{x} is a city in {a}."),
    "city_founded": ("city", None, ["In what year was {x} founded?", "When was {x} founded?"], [],
                     "{x} was founded in {a}."),
    "capital": ("country", "city", ["What is the capital of {x}?", "Which city is the capital of {x}?"],
                ["the capital of {s}", "the capital city of {s}"], "The capital of {x} is {a}."),
    "language": ("country", None, ["What is the official language of {x}?", "Which language is official in {x}?"],
                 [], "The official language of {x} is {a}."),
    "creator": ("work", "person", [], [], ""),
    "year": ("work", None, [], [], ""),
    "publisher": ("work", "org", [], [], ""),
    "setting": ("work", "city", ["In which city is {x} set?", "Where is {x} set?"],
                ["the city where {s} is set", "the setting of {s}"], "{x} is set in {a}."),
}


PUNCTUATION = frozenset(string.punctuation)


@dataclass
class Entity:
    kind: str          # person, city, country, org, work
    name: str
    sub: str = ""      # occupation, org kind or work kind
    facts: dict = field(default_factory=dict)  # relation -> Entity, or str for literals
    passage: int = -1  # its row in the corpus


@dataclass
class Question:
    question: str
    answer: str
    hops: int
    expert: list[str]
    gold_passages: list[int]  # corpus row each search of `expert` must find


@dataclass
class World:
    passages: list[tuple[str, str]]  # (title, text), row = index
    test: list[Question]
    train: list[Question]


def normalize_answer(text: str) -> str:
    """SQuAD normalisation (AgentGym's qa_em): lower-case, drop punctuation, drop a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def contains_answer(passage: str, answer: str) -> bool:
    """Whether the normalised `answer` occurs as whole words in the normalised `passage`."""
    return f" {normalize_answer(answer)} " in f" {normalize_answer(passage)} "


class Names:
    """Unique capitalised syllable words. Two words never share a stem (for BM25 they would be one word)."""

    def __init__(self, rng: random.Random):
        import Stemmer   # with bm25s: only the corpus build needs them, not a SearchQA episode

        from bm25s.stopwords import STOPWORDS_EN
        self.rng, self.stem = rng, Stemmer.Stemmer("english").stemWord
        self.taken = set(STOPWORDS_EN)  # and every word the templates use: a name never looks like one
        for text in [*OCCUPATIONS, *INDUSTRIES, *FEATURES, *PRAISE, *sum(ORG_SUFFIX.values(), []),
                     *sum(TITLE_PATTERNS.values(), [])]:
            self.taken.update(w for word in re.findall(r"[A-Za-z]+", text.lower()) for w in (word, self.stem(word)))

    def word(self, syllables: tuple[int, ...] = (2, 2, 2, 3)) -> str:
        while True:
            n = self.rng.choice(syllables)
            word = "".join(self.rng.choice(ONSETS) + self.rng.choice(VOWELS) + self.rng.choice(CODAS)
                           for _ in range(n)).capitalize()
            if 5 <= len(word) <= 10 and not any(b in word.lower() for b in BLOCKED) and self.claim(word):
                return word

    def claim(self, word: str) -> bool:
        key = self.stem(word.lower())
        if key in self.taken or word.lower() in self.taken:
            return False
        self.taken.update((key, word.lower()))
        return True


def weighted(rng: random.Random, weights: dict) -> str:
    keys = list(weights)
    return rng.choices(keys, [weights[k][1] if isinstance(weights[k], tuple) else weights[k] for k in keys])[0]


def language_name(names: Names, country: str) -> str:
    root = country[:-1] if country[-1] in "aeiouy" else country
    for suffix in ("ese", "ian", "ic", "ish", "ene"):
        if names.claim(root + suffix):
            return root + suffix
    return names.word()


def make_entities(rng: random.Random) -> dict[str, list[Entity]]:
    """Draw every entity and fact. Relations point only at entities that exist, in a consistent timeline."""
    names = Names(rng)
    continents = [names.word((2, 3)) for _ in range(6)]
    countries = []
    for _ in range(SIZES["country"]):
        name = names.word()
        countries.append(Entity("country", name, facts={"language": language_name(names, name),
                                                         "continent": rng.choice(continents),
                                                         "independence": str(rng.randint(1650, 1990))}))
    # every country gets a city first (its capital is one of its own cities), the rest are spread at random
    cities = [Entity("city", names.word(), facts={"country": countries[i] if i < len(countries) else
                                                  rng.choice(countries),
                                                  "city_founded": str(rng.randint(900, 1850)),
                                                  "population": f"{rng.randint(12, 2400) * 1000:,}",
                                                  "river": names.word((2,)), "feature": rng.choice(FEATURES)})
              for i in range(SIZES["city"])]
    for country in countries:
        country.facts["capital"] = rng.choice([c for c in cities if c.facts["country"] is country])
    first_names = [names.word((2,)) for _ in range(400)]
    people = []
    for _ in range(SIZES["person"]):
        name = f"{rng.choice(first_names)} {names.word()}"
        people.append(Entity("person", name, weighted(rng, OCCUPATIONS),
                             {"birthplace": rng.choice(cities), "birth_year": str(rng.randint(1780, 1995)),
                              "pronoun": rng.choice(["he", "she"])}))
    orgs = []
    for _ in range(SIZES["org"]):
        kind = weighted(rng, ORG_KINDS)
        founder = rng.choice(people)
        founded = min(int(founder.facts["birth_year"]) + rng.randint(22, 55), 2020)
        name = f"{names.word()} {rng.choice(ORG_SUFFIX[kind])}"
        orgs.append(Entity("org", name, kind, {"founder": founder, "founded": str(founded), "base": rng.choice(cities),
                                               "industry": rng.choice(INDUSTRIES)}))
    universities = [o for o in orgs if o.sub == "university"]
    employers = [o for o in orgs if o.sub != "university"]
    for person in people:
        person.facts["alma_mater"] = rng.choice(universities)
        person.facts["employer"] = rng.choice(employers)
    by_occupation = {job: [p for p in people if p.sub == job] for job in OCCUPATIONS}
    by_org_kind = {kind: [o for o in orgs if o.sub == kind] for kind in ORG_KINDS}
    works = []
    for kind, count in WORK_SHARE.items():
        job, _, _, _, _, publisher_kind = WORK_KINDS[kind]
        for _ in range(count):
            creator = rng.choice(by_occupation[job])
            facts = {"creator": creator, "year": str(min(int(creator.facts["birth_year"]) + rng.randint(20, 60), 2023)),
                     "praise": rng.choice(PRAISE)}
            if publisher_kind:
                facts["publisher"] = rng.choice(by_org_kind[publisher_kind])
            if kind in ("novel", "film"):
                facts["setting"] = rng.choice(cities)
            title = rng.choice(TITLE_PATTERNS[kind]).format(w=names.word())
            works.append(Entity("work", title, kind, facts))
    return {"country": countries, "city": cities, "person": people, "org": orgs, "work": works}


def write_passage(rng: random.Random, e: Entity) -> str:
    """A few sentences stating the entity's facts; the only passage that states its relations."""
    f = e.facts
    if e.kind == "person":
        surname, pron = e.name.split(" ", 1)[1], f["pronoun"]
        their = "his" if pron == "he" else "her"
        article = "an" if e.sub[0] in "aeio" else "a"
        first = rng.choice([f"{e.name} (born {f['birth_year']}) is {article} {e.sub}.",
                            f"{e.name} is {article} {e.sub}, born in {f['birth_year']}."])
        born = rng.choice([f"{pron.capitalize()} was born in {f['birthplace'].name}.",
                           f"{surname} was born in the city of {f['birthplace'].name}."])
        work = rng.choice([f"{surname} studied at {f['alma_mater'].name} and later worked for {f['employer'].name}.",
                           f"After studying at {f['alma_mater'].name}, {pron} joined {f['employer'].name}."])
        extra = rng.choice([f"{surname} is regarded as one of the notable {e.sub}s of {their} generation.",
                            f"{pron.capitalize()} received several awards during {their} career.",
                            f"Colleagues described {surname} as meticulous and private."])
        return " ".join([first, born, work, extra])
    if e.kind == "org":
        what = ORG_KINDS[e.sub][0].format(industry=f["industry"])
        first = f"{e.name} is {'an' if what[0] in 'aeio' else 'a'} {what} based in {f['base'].name}."
        founded = rng.choice([f"It was founded in {f['founded']} by {f['founder'].name}.",
                              f"{f['founder'].name} founded it in {f['founded']}."])
        extra = rng.choice(["It grew quickly during its first decades.", "Its early years were marked by rivalry "
                            "with larger competitors.", "It has changed ownership several times."])
        return " ".join([first, founded, extra])
    if e.kind == "city":
        return (f"{e.name} is a city in {f['country'].name}. It was founded in {f['city_founded']} and has a "
                f"population of about {f['population']}. {e.name} lies on the {f['river']} River and is known for "
                f"its {f['feature']}.")
    if e.kind == "country":
        return (f"{e.name} is a country on the continent of {f['continent']}. Its capital is {f['capital'].name}, and "
                f"its official language is {f['language']}. {e.name} became independent in {f['independence']}.")
    released = WORK_KINDS[e.sub][4]
    by = {"film": "directed by"}.get(e.sub, "by")
    sentences = [f"{e.name} is {'an' if e.sub == 'album' else 'a'} {e.sub} {by} {f['creator'].name}, {released} in "
                 f"{f['year']}."]
    if "publisher" in f:
        sentences.append({"novel": "Its publisher is {p}.", "film": "It was produced by {p}.",
                          "album": "It came out on the {p} label."}[e.sub].format(p=f["publisher"].name))
    if "setting" in f:
        sentences.append(f"The story is set in {f['setting'].name}.")
    if e.sub == "painting":
        sentences.append(f"The canvas measures {rng.randint(30, 240)} by {rng.randint(30, 240)} centimetres.")
    sentences.append(f"The {e.sub} received {f['praise']} reviews." if e.sub != "painting" else
                     "It is considered one of the artist's mature works.")
    return " ".join(sentences)


def work_wording(relation: str, kind: str) -> tuple[list[str], list[str], str]:
    """(asks, descriptions, statement) of a work relation, in the work kind's own verbs."""
    _, role, past, made, released, _ = WORK_KINDS[kind]
    if relation == "creator":
        return ([f"Who {past} {{x}}?", f"Who is the {role} of {{x}}?"], [f"the {role} of {{s}}"],
                f"{{x}} was {made} by {{a}}.")
    if relation == "year":
        return [f"In what year was {{x}} {released}?"], [], f"{{x}} was {released} in {{a}}."
    if relation == "publisher":
        noun = {"novel": "publisher", "film": "studio", "album": "label"}[kind]
        return ([f"Which {noun} {released} {{x}}?"], [f"the {noun} that {released} {{s}}"],
                f"{{x}} was {released} by {{a}}.")
    _, _, asks, descriptions, statement = RELATIONS[relation]
    return asks, descriptions, statement


def wording(relation: str, subject: Entity) -> tuple[list[str], list[str], str]:
    if subject.kind == "work":
        return work_wording(relation, subject.sub)
    _, _, asks, descriptions, statement = RELATIONS[relation]
    return asks, descriptions, statement


def relations_of(e: Entity, *, to_entity: bool = False) -> list[str]:
    """The relations `e` has (optionally only those pointing at another entity), in RELATIONS order."""
    return [r for r, (kind, target, *_) in RELATIONS.items()
            if kind == e.kind and r in e.facts and (target is not None or not to_entity)]


def value(e: Entity, relation: str) -> str:
    v = e.facts[relation]
    return v.name if isinstance(v, Entity) else v


def think(text: str, tag: str, content: str) -> str:
    return f"<think>{text}</think>\n<{tag}>{content}</{tag}>"


def ask_one_hop(rng: random.Random, s: Entity, relation: str) -> Question:
    asks, _, statement = wording(relation, s)
    answer = value(s, relation)
    question = rng.choice(asks).format(x=s.name)
    expert = [think(f"I need to look up {s.name}.", "search", s.name),
              think(statement.format(x=s.name, a=answer) + f" So the answer is {answer}.", "answer", answer)]
    return Question(question, answer, 1, expert, [s.passage])


def ask_two_hop(rng: random.Random, s: Entity, inner: str, outer: str) -> Question:
    bridge = s.facts[inner]
    _, descriptions, inner_statement = wording(inner, s)
    asks, _, outer_statement = wording(outer, bridge)
    answer = value(bridge, outer)
    described = rng.choice(descriptions).format(s=s.name)
    question = rng.choice(asks).format(x=described)
    expert = [think(f"I need to find {described} first, so I will look up {s.name}.", "search", s.name),
              think(inner_statement.format(x=s.name, a=bridge.name) + f" Now I need to look up {bridge.name}.",
                    "search", bridge.name),
              think(outer_statement.format(x=bridge.name, a=answer) + f" So the answer is {answer}.", "answer", answer)]
    return Question(question, answer, 2, expert, [s.passage, bridge.passage])


def make_questions(rng: random.Random, entities: dict[str, list[Entity]], contents: list[str],
                   mentions: dict[str, list[int]], count: int, hops: int, used: set[str]) -> list[Question]:
    """`count` questions of `hops` hops, each about a subject not in `used` (which is updated).

    An entity kind is drawn uniformly among those with unused subjects left (works: a work kind, weighted so that
    works as a whole count as one kind), then a subject, then one of its shapes (a relation, or an inner then an
    outer relation). A 2-hop question is dropped if a passage mentioning its subject contains the answer."""
    pools, shapes = {}, {}
    for kind, members in entities.items():
        for e in members:
            pools.setdefault(e.sub if kind == "work" else kind, []).append(e)
    for key, pool in pools.items():
        e = pool[0]  # all members of a pool have the same relations
        if hops == 1:
            shapes[key] = [(r, None) for r in relations_of(e)]
        else:
            shapes[key] = [(inner, outer) for inner in relations_of(e, to_entity=True)
                           for outer in relations_of(e.facts[inner]) if (inner, outer) != ("capital", "country")]
    remaining = {key: rng.sample(pool, len(pool)) for key, pool in pools.items() if shapes[key]}
    weight = {key: 1 / len(WORK_KINDS) if key in WORK_KINDS else 1.0 for key in remaining}
    questions = []
    while len(questions) < count:
        live = [key for key, pool in remaining.items() if pool]
        if not live:
            raise RuntimeError(f"ran out of subjects after {len(questions)} {hops}-hop questions")
        key = rng.choices(live, [weight[k] for k in live])[0]
        s = remaining[key].pop()
        if s.name in used:
            continue
        first, second = rng.choice(shapes[key])
        if hops == 1:
            question = ask_one_hop(rng, s, first)
        else:
            question = ask_two_hop(rng, s, first, second)
            if any(contains_answer(contents[row], question.answer) for row in mentions[s.name]):
                continue
        used.add(s.name)
        questions.append(question)
    return questions


def generate(seed: int = 0) -> World:
    """The whole knowledge base and its questions (about a second)."""
    rng = random.Random(seed)
    entities = make_entities(rng)
    everyone = [e for kind in ("person", "city", "country", "org", "work") for e in entities[kind]]
    rng.shuffle(everyone)  # corpus rows in random order, so a row number says nothing about the kind
    texts, mentions = [], {}
    for row, e in enumerate(everyone):
        e.passage = row
        texts.append(write_passage(rng, e))
        mentions.setdefault(e.name, []).append(row)
        for v in e.facts.values():
            if isinstance(v, Entity):
                mentions.setdefault(v.name, []).append(row)
    contents = [f"{e.name}\n{text}" for e, text in zip(everyone, texts)]
    used: set[str] = set()
    one = make_questions(rng, entities, contents, mentions, (N_TEST + N_TRAIN) // 2, 1, used)
    two = make_questions(rng, entities, contents, mentions, (N_TEST + N_TRAIN) // 2, 2, used)
    mixed = [q for pair in zip(one, two) for q in pair]  # alternate 1-hop / 2-hop
    return World([(e.name, t) for e, t in zip(everyone, texts)], mixed[:N_TEST], mixed[N_TEST:])


def default_dir(seed: int = 0) -> Path:
    return Path(default_outputs_dir()) / "data" / "searchqa" / f"fictional-v{VERSION}-seed{seed}"


def question_records(questions: list[Question], start: int) -> list[dict]:
    return [{"id": str(start + i), "question": q.question, "golden_answers": [q.answer],
             "data_source": f"{q.hops}-hop", "expert": q.expert, "gold_passages": q.gold_passages}
            for i, q in enumerate(questions)]


def build(directory: str | os.PathLike | None = None, seed: int = 0) -> dict[str, Path]:
    """Write corpus.jsonl, test.jsonl and train.jsonl into `directory` (default: `default_dir(seed)`) unless they
    are already there; returns their paths. Written to a temporary folder and renamed, so concurrent builders
    (several servers, test workers) never see half a corpus."""
    directory = Path(directory) if directory else default_dir(seed)
    paths = {name: directory / f"{name}.jsonl" for name in ("corpus", "test", "train")}
    if all(p.exists() for p in paths.values()):
        return paths
    world = generate(seed)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=directory.name + ".", dir=directory.parent))
    try:
        with open(tmp / "corpus.jsonl", "w") as out:
            for row, (title, text) in enumerate(world.passages):
                out.write(json.dumps({"id": str(row), "contents": f'"{title}"\n{text}'}) + "\n")
        for name, questions, start in (("test", world.test, 0), ("train", world.train, len(world.test))):
            with open(tmp / f"{name}.jsonl", "w") as out:
                out.writelines(json.dumps(r) + "\n" for r in question_records(questions, start))
        try:
            os.rename(tmp, directory)
        except OSError:  # another process finished first; theirs is identical
            if not all(p.exists() for p in paths.values()):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return paths
