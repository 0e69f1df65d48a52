"""A deterministic synthetic chat corpus: what the embedded target and drafter are trained on, and where the
built-in ``synthetic`` workload draws its prompts from.

Three categories mimic the real suites:

- ``math``: GSM8K-style word problems (with GSM8K's "reason step by step ... \\boxed{}" suffix) answered with
  step-by-step working that restates the problem's quantities and ends in ``\\boxed{answer}``;
- ``code``: "write a Python function" requests (function and argument names given in the prompt) answered with
  a fenced function whose body is fixed by the task, plus a one-line explanation;
- ``writing``: open-ended prose requests answered by prose drawn from a large phrase grammar.

The design goal is the paper's shape of results on a tiny model: on math and code the answer is (almost) a
deterministic function of the prompt - long, template-like continuations that copy names and numbers from the
prompt - so a well-trained tiny target is near-deterministic there and a drafter can predict long runs (high
tau). On writing the answer is mostly free choice, so the target's greedy path is harder to predict (low tau).

Seeding: every conversation comes from its own ``random.Random`` seeded with a string key. Training uses keys
``"train/{seed}/{i}"``, held-out evaluation ``"heldout/{seed}/{i}"`` and demo prompts ``"demo/{seed}/{category}/{i}"``:
the key spaces are disjoint (different prefixes), so no demo conversation is drawn from a training stream for any
pair of seeds.
``str`` seeds are hashed with SHA-512 by :mod:`random`, which is stable across Python versions and platforms.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

CATEGORIES = ("math", "code", "writing")

MATH_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True, slots=True)
class Conversation:
    """One single-turn chat: a user request and the assistant's answer."""

    category: str
    user: str
    assistant: str

    def messages(self, *, with_answer: bool = True) -> list[dict[str, str]]:
        """OpenAI-style chat messages (the answer included unless ``with_answer`` is False)."""
        msgs = [{"role": "user", "content": self.user}]
        if with_answer:
            msgs.append({"role": "assistant", "content": self.assistant})
        return msgs


# --------------------------------------------------------------------------------------------- math

_NAMES = (
    "Tom", "Anna", "Liam", "Mia", "Noah", "Emma", "Omar", "Sofia", "Ravi", "Chen", "Lena", "Jack", "Ella",
    "Mateo", "Aisha", "Ben", "Chloe", "David", "Grace", "Hugo", "Iris", "Jonas", "Kate", "Leo", "Maya",
    "Nina", "Oscar", "Paula", "Sam", "Tara", "Yuki", "Zoe",
)  # fmt: skip
_PRONOUN = {n: ("she" if n in {"Anna", "Mia", "Emma", "Sofia", "Lena", "Ella", "Aisha", "Chloe", "Grace",
                                "Iris", "Kate", "Maya", "Nina", "Paula", "Tara", "Yuki", "Zoe"} else "he")
            for n in _NAMES}  # fmt: skip
_ITEMS = (
    "apples", "books", "marbles", "pencils", "stickers", "cookies", "cards", "stamps", "shells", "coins",
    "balloons", "oranges", "candles", "buttons", "flowers", "toy cars", "cupcakes", "notebooks", "eggs", "beads",
)  # fmt: skip
_PLACES = ("the market", "the store", "the bakery", "the fair", "the shop", "the school sale")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _math_add(rng: random.Random) -> tuple[str, str]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    he = _PRONOUN[name]
    a, b = rng.randint(2, 60), rng.randint(2, 40)
    q = f"{name} has {a} {item}. {_cap(he)} gets {b} more {item} at {rng.choice(_PLACES)}. How many {item} does {name} have now?"
    ans = (
        f"{name} starts with {a} {item}.\n"
        f"Then {he} gets {b} more {item}.\n"
        f"To find the total, we add the two amounts: {a} + {b} = {a + b}.\n"
        f"So {name} has {a + b} {item} now.\n\n"
        f"The answer is \\boxed{{{a + b}}}."
    )
    return q, ans


def _math_sub(rng: random.Random) -> tuple[str, str]:
    name, friend, item = rng.choice(_NAMES), rng.choice(_NAMES), rng.choice(_ITEMS)
    he = _PRONOUN[name]
    a = rng.randint(10, 80)
    b = rng.randint(1, a - 1)
    q = f"{name} had {a} {item} and gave {b} of them to {friend}. How many {item} does {name} have left?"
    ans = (
        f"{name} starts with {a} {item}.\n"
        f"{_cap(he)} gives {b} {item} to {friend}.\n"
        f"To find what is left, we subtract: {a} - {b} = {a - b}.\n"
        f"So {name} has {a - b} {item} left.\n\n"
        f"The answer is \\boxed{{{a - b}}}."
    )
    return q, ans


def _math_mul(rng: random.Random) -> tuple[str, str]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    he = _PRONOUN[name]
    boxes, each = rng.randint(2, 9), rng.randint(2, 12)
    container = rng.choice(("boxes", "bags", "baskets", "jars", "packs"))
    q = f"{name} buys {boxes} {container} of {item}. Each of the {container} holds {each} {item}. How many {item} does {name} buy in total?"
    ans = (
        f"{name} buys {boxes} {container}.\n"
        f"Each of the {container} holds {each} {item}.\n"
        f"To find the total, we multiply: {boxes} x {each} = {boxes * each}.\n"
        f"So {he} buys {boxes * each} {item} in total.\n\n"
        f"The answer is \\boxed{{{boxes * each}}}."
    )
    return q, ans


def _math_div(rng: random.Random) -> tuple[str, str]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    he = _PRONOUN[name]
    friends, each = rng.randint(2, 9), rng.randint(2, 10)
    total = friends * each
    q = f"{name} shares {total} {item} equally among {friends} friends. How many {item} does each friend get?"
    ans = (
        f"{name} has {total} {item} to share.\n"
        f"{_cap(he)} shares them equally among {friends} friends.\n"
        f"To find each share, we divide: {total} / {friends} = {each}.\n"
        f"So each friend gets {each} {item}.\n\n"
        f"The answer is \\boxed{{{each}}}."
    )
    return q, ans


def _math_two_step(rng: random.Random) -> tuple[str, str]:
    name, friend, item = rng.choice(_NAMES), rng.choice(_NAMES), rng.choice(_ITEMS)
    he = _PRONOUN[name]
    a, b = rng.randint(5, 40), rng.randint(2, 30)
    c = rng.randint(1, a + b - 1)
    q = (
        f"{name} has {a} {item}. {_cap(he)} buys {b} more and then gives {c} to {friend}. "
        f"How many {item} does {name} have now?"
    )
    ans = (
        f"{name} starts with {a} {item}.\n"
        f"Step 1: {_cap(he)} buys {b} more, so {he} has {a} + {b} = {a + b} {item}.\n"
        f"Step 2: {_cap(he)} gives {c} to {friend}, so {he} has {a + b} - {c} = {a + b - c} {item}.\n"
        f"So {name} has {a + b - c} {item} now.\n\n"
        f"The answer is \\boxed{{{a + b - c}}}."
    )
    return q, ans


def _math_price(rng: random.Random) -> tuple[str, str]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    he = _PRONOUN[name]
    price, count = rng.randint(2, 15), rng.randint(2, 9)
    paid = price * count + rng.randint(0, 20)
    q = (
        f"At {rng.choice(_PLACES)}, {item} cost ${price} each. {name} buys {count} {item} and pays with ${paid}. "
        f"How much change does {name} get?"
    )
    cost = price * count
    ans = (
        f"Each of the {item} costs ${price}, and {name} buys {count} of them.\n"
        f"Step 1: The total cost is {count} x ${price} = ${cost}.\n"
        f"Step 2: {_cap(he)} pays ${paid}, so the change is ${paid} - ${cost} = ${paid - cost}.\n"
        f"So {name} gets ${paid - cost} in change.\n\n"
        f"The answer is \\boxed{{{paid - cost}}}."
    )
    return q, ans


def _math_rect(rng: random.Random) -> tuple[str, str]:
    w, h = rng.randint(2, 20), rng.randint(2, 20)
    what = rng.choice(("garden", "room", "field", "table", "poster", "playground", "pool", "rug", "patio",
                        "wall"))
    unit = rng.choice(("meters", "feet", "yards", "inches", "centimeters"))
    ask_area = rng.random() < 0.5
    if ask_area:
        q = f"A rectangular {what} is {w} {unit} long and {h} {unit} wide. What is its area in square {unit}?"
        ans = (
            f"The {what} is a rectangle that is {w} {unit} long and {h} {unit} wide.\n"
            f"The area of a rectangle is length times width.\n"
            f"So the area is {w} x {h} = {w * h} square {unit}.\n\n"
            f"The answer is \\boxed{{{w * h}}}."
        )
    else:
        q = f"A rectangular {what} is {w} {unit} long and {h} {unit} wide. What is its perimeter in {unit}?"
        ans = (
            f"The {what} is a rectangle that is {w} {unit} long and {h} {unit} wide.\n"
            f"The perimeter of a rectangle is 2 x (length + width).\n"
            f"Step 1: {w} + {h} = {w + h}.\n"
            f"Step 2: 2 x {w + h} = {2 * (w + h)}.\n"
            f"So the perimeter is {2 * (w + h)} {unit}.\n\n"
            f"The answer is \\boxed{{{2 * (w + h)}}}."
        )
    return q, ans


_MATH = (_math_add, _math_sub, _math_mul, _math_div, _math_two_step, _math_price, _math_rect)


def _math(rng: random.Random) -> tuple[str, str]:
    q, a = rng.choice(_MATH)(rng)
    return q + MATH_SUFFIX, a


# --------------------------------------------------------------------------------------------- code

# task -> (description, argument kind, body lines using {x} for the argument, explanation)
_CODE_TASKS: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "sum": ("returns the sum of the numbers in the list", "list",
            ("total = 0", "for value in {x}:", "    total += value", "return total"),
            "The function adds each number in {x} to a running total and returns it."),
    "sum_squares": ("returns the sum of the squares of the numbers in the list", "list",
                    ("total = 0", "for value in {x}:", "    total += value * value", "return total"),
                    "The function adds the square of each number in {x} to a running total and returns it."),
    "maximum": ("returns the largest number in the list", "list",
                ("best = {x}[0]", "for value in {x}[1:]:", "    if value > best:", "        best = value",
                 "return best"),
                "The function keeps the largest value seen so far while it walks through {x}."),
    "minimum": ("returns the smallest number in the list", "list",
                ("best = {x}[0]", "for value in {x}[1:]:", "    if value < best:", "        best = value",
                 "return best"),
                "The function keeps the smallest value seen so far while it walks through {x}."),
    "average": ("returns the average of the numbers in the list", "list",
                ("if not {x}:", "    return 0.0", "return sum({x}) / len({x})"),
                "The function divides the sum of {x} by its length, and returns 0.0 for an empty list."),
    "evens": ("returns a new list with only the even numbers", "list",
              ("result = []", "for value in {x}:", "    if value % 2 == 0:", "        result.append(value)",
               "return result"),
              "The function keeps each number in {x} that is divisible by 2."),
    "odds": ("returns a new list with only the odd numbers", "list",
             ("result = []", "for value in {x}:", "    if value % 2 == 1:", "        result.append(value)",
              "return result"),
             "The function keeps each number in {x} that leaves a remainder of 1 when divided by 2."),
    "count_positive": ("counts how many numbers in the list are positive", "list",
                       ("count = 0", "for value in {x}:", "    if value > 0:", "        count += 1", "return count"),
                       "The function counts each number in {x} that is greater than zero."),
    "reverse": ("returns the string reversed", "str",
                ("return {x}[::-1]",),
                "The slice [::-1] walks through {x} backwards, which gives the reversed string."),
    "is_palindrome": ("checks whether the string reads the same forwards and backwards", "str",
                      ("cleaned = {x}.lower().replace(\" \", \"\")", "return cleaned == cleaned[::-1]"),
                      "The function lowercases {x}, removes spaces and compares it with its reverse."),
    "count_vowels": ("counts the vowels in the string", "str",
                     ("count = 0", "for char in {x}.lower():", "    if char in \"aeiou\":", "        count += 1",
                      "return count"),
                     "The function checks each character of {x} against the five vowels."),
    "capitalize_words": ("capitalizes the first letter of every word in the string", "str",
                         ("words = {x}.split()", "return \" \".join(word.capitalize() for word in words)"),
                         "The function splits {x} into words, capitalizes each one and joins them back."),
    "factorial": ("returns the factorial of the number", "int",
                  ("result = 1", "for i in range(2, {x} + 1):", "    result *= i", "return result"),
                  "The function multiplies all the integers from 2 up to {x}."),
    "fibonacci": ("returns the n-th Fibonacci number", "int",
                  ("a, b = 0, 1", "for _ in range({x}):", "    a, b = b, a + b", "return a"),
                  "The function keeps the last two Fibonacci numbers and advances them {x} times."),
    "is_prime": ("checks whether the number is prime", "int",
                 ("if {x} < 2:", "    return False", "for i in range(2, int({x} ** 0.5) + 1):",
                  "    if {x} % i == 0:", "        return False", "return True"),
                 "The function tries every divisor up to the square root of {x}."),
    "sum_digits": ("returns the sum of the digits of the number", "int",
                   ("total = 0", "for digit in str(abs({x})):", "    total += int(digit)", "return total"),
                   "The function turns {x} into a string and adds up its digits."),
    "celsius": ("converts a temperature from Celsius to Fahrenheit", "float",
                ("return {x} * 9 / 5 + 32",),
                "The function applies the formula F = C * 9 / 5 + 32 to {x}."),
    "square": ("returns the square of the number", "float",
               ("return {x} * {x}",),
               "The function multiplies {x} by itself."),
    "word_count": ("counts how many times each word appears in the string", "str",
                   ("counts = {{}}", "for word in {x}.split():", "    counts[word] = counts.get(word, 0) + 1",
                    "return counts"),
                   "The function splits {x} into words and counts them in a dictionary."),
    "dedupe": ("removes duplicates from the list while keeping the original order", "list",
               ("seen = set()", "result = []", "for value in {x}:", "    if value not in seen:",
                "        seen.add(value)", "        result.append(value)", "return result"),
               "The function remembers the values it has seen and keeps only the first copy of each."),
}  # fmt: skip
_ARG_NAMES = {
    "list": ("nums", "values", "numbers", "items", "data", "scores", "xs"),
    "str": ("text", "s", "word", "sentence", "line", "phrase"),
    "int": ("n", "num", "k", "count", "x"),
    "float": ("x", "value", "temp", "celsius", "number"),
}
_ARG_TYPES = {"list": "list[int]", "str": "str", "int": "int", "float": "float"}
_RET_TYPES = {
    "sum": "int", "sum_squares": "int", "maximum": "int", "minimum": "int", "average": "float",
    "evens": "list[int]", "odds": "list[int]", "count_positive": "int", "reverse": "str",
    "is_palindrome": "bool", "count_vowels": "int", "capitalize_words": "str", "factorial": "int",
    "fibonacci": "int", "is_prime": "bool", "sum_digits": "int", "celsius": "float", "square": "float",
    "word_count": "dict[str, int]", "dedupe": "list[int]",
}  # fmt: skip
_FUNC_NAMES = {
    "sum": ("total", "list_sum", "add_all", "sum_list"),
    "sum_squares": ("sum_of_squares", "square_sum", "sum_squares"),
    "maximum": ("find_max", "largest", "max_value", "biggest"),
    "minimum": ("find_min", "smallest", "min_value", "lowest"),
    "average": ("average", "mean", "list_average", "compute_mean"),
    "evens": ("only_even", "filter_even", "even_numbers", "keep_even"),
    "odds": ("only_odd", "filter_odd", "odd_numbers", "keep_odd"),
    "count_positive": ("count_positive", "num_positive", "positives"),
    "reverse": ("reverse_string", "reversed_text", "flip"),
    "is_palindrome": ("is_palindrome", "check_palindrome", "palindrome"),
    "count_vowels": ("count_vowels", "vowel_count", "num_vowels"),
    "capitalize_words": ("title_case", "capitalize_words", "cap_words"),
    "factorial": ("factorial", "fact", "compute_factorial"),
    "fibonacci": ("fibonacci", "fib", "nth_fibonacci"),
    "is_prime": ("is_prime", "check_prime", "prime"),
    "sum_digits": ("digit_sum", "sum_digits", "add_digits"),
    "celsius": ("to_fahrenheit", "celsius_to_fahrenheit", "c_to_f"),
    "square": ("square", "squared", "power_two"),
    "word_count": ("word_count", "count_words", "word_frequencies"),
    "dedupe": ("dedupe", "unique", "remove_duplicates"),
}  # fmt: skip
_CODE_ASKS = (
    "Write a Python function `{sig}` that {desc}.",
    "Implement `{sig}` in Python. It {desc}.",
    "Can you write a Python function named `{name}` that takes `{x}` and {desc}?",
    "Write a function `{sig}` in Python which {desc}. Keep it simple.",
)


def _code(rng: random.Random) -> tuple[str, str]:
    task = rng.choice(sorted(_CODE_TASKS))
    desc, kind, body, explain = _CODE_TASKS[task]
    name, x = rng.choice(_FUNC_NAMES[task]), rng.choice(_ARG_NAMES[kind])
    sig = f"{name}({x})"
    doc = re.sub(r"\bthe (list|string|number)\b", x, desc)
    q = rng.choice(_CODE_ASKS).format(sig=sig, desc=desc, name=name, x=x)
    lines = [
        "```python",
        f"def {name}({x}: {_ARG_TYPES[kind]}) -> {_RET_TYPES[task]}:",
        f'    """{_cap(doc)}."""',
        *("    " + line.format(x=x) for line in body),
        "```",
    ]
    a = "Here is the function:\n\n" + "\n".join(lines) + "\n\n" + explain.format(x=f"`{x}`")
    return q, a


# ------------------------------------------------------------------------------------------ writing

_TOPICS = (
    "the ocean", "autumn", "a quiet library", "city life", "learning to cook", "friendship", "the night sky",
    "a rainy afternoon", "mountains", "growing vegetables", "an old train station", "music", "morning coffee",
    "a small village", "winter mornings", "bicycles", "the desert", "a busy kitchen", "old photographs",
    "learning a language", "the forest", "summer holidays", "a lighthouse", "working from home",
)  # fmt: skip
_FORMS = ("short paragraph", "short story", "short poem in prose", "brief reflection", "short description")
_WRITING_ASKS = (
    "Write a {form} about {topic}.",
    "Describe {topic} in a few sentences.",
    "Tell me something nice about {topic}.",
    "Write a {form} that captures the feeling of {topic}.",
    "What do you think about {topic}? Answer in a few sentences.",
    "Give me some advice about {topic}.",
)
_OPENERS = (
    "There is something {adj} about {topic}.", "{Topic} always feels {adj} to me.",
    "Few things are as {adj} as {topic}.", "When I think of {topic}, I think of {noun}.",
    "People often say that {topic} is {adj}.", "I have always found {topic} {adj}.",
    "{Topic} has a way of making the world feel {adj}.",
)  # fmt: skip
_ADJ = (
    "calm", "strange", "bright", "gentle", "restless", "warm", "quiet", "wild", "simple", "tender", "vast",
    "familiar", "hopeful", "slow", "golden", "honest", "soft", "lively", "patient", "curious",
)  # fmt: skip
_NOUNS = (
    "long walks", "the smell of rain", "a half-finished letter", "distant voices", "an open window",
    "the sound of footsteps", "a cup of tea", "a worn-out map", "children laughing", "the first light",
    "an empty street", "a familiar song", "the weight of a coat", "a flickering lamp", "fresh bread",
    "a sleeping cat", "the hum of the fridge", "a folded note", "wet leaves", "a crowded bus",
)  # fmt: skip
_VERBS = (
    "remember", "notice", "wonder about", "look for", "listen to", "think about", "hold on to", "return to",
    "forget", "write about", "miss", "carry",
)  # fmt: skip
_MIDDLES = (
    "Sometimes I {verb} {noun} and feel {adj}.", "It reminds me of {noun} and {noun2}.",
    "In the {time}, everything seems {adj} and {adj2}.", "You might {verb} {noun} without even trying.",
    "Nobody needs a reason to {verb} {noun}.", "The {time} brings {noun}, and with it a {adj} mood.",
    "It is easy to {verb} {noun} when the day is {adj}.", "Even {noun} can feel {adj} here.",
    "Most of all, I {verb} {noun}.", "Somewhere between {noun} and {noun2}, the day becomes {adj}.",
)  # fmt: skip
_TIMES = ("morning", "evening", "afternoon", "night", "early hours", "late summer", "spring")
_CLOSERS = (
    "In the end, {topic} teaches us to be {adj}.", "That is why {topic} matters to me.",
    "Maybe that is all {topic} ever asks of us.", "And so the day ends, {adj} and {adj2}.",
    "I hope you find something {adj} in it too.", "It is a small thing, but it stays with you.",
)  # fmt: skip


def _fill(template: str, rng: random.Random, topic: str) -> str:
    adj, adj2 = rng.sample(_ADJ, 2)
    noun, noun2 = rng.sample(_NOUNS, 2)
    return template.format(
        topic=topic, Topic=_cap(topic), adj=adj, adj2=adj2, noun=noun, noun2=noun2,
        verb=rng.choice(_VERBS), time=rng.choice(_TIMES),
    )  # fmt: skip


def _writing(rng: random.Random) -> tuple[str, str]:
    topic = rng.choice(_TOPICS)
    q = rng.choice(_WRITING_ASKS).format(form=rng.choice(_FORMS), topic=topic)
    sentences = [_fill(rng.choice(_OPENERS), rng, topic)]
    sentences += [_fill(t, rng, topic) for t in rng.sample(_MIDDLES, rng.randint(2, 4))]
    sentences.append(_fill(rng.choice(_CLOSERS), rng, topic))
    return q, " ".join(sentences)


# --------------------------------------------------------------------------------------------- API

_GENERATORS = {"math": _math, "code": _code, "writing": _writing}


def sample_conversation(category: str, rng: random.Random) -> Conversation:
    """One conversation of ``category`` ("math", "code" or "writing"), drawn from ``rng``."""
    if category not in _GENERATORS:
        raise ValueError(f"unknown category {category!r}; choose one of: {', '.join(CATEGORIES)}")
    user, assistant = _GENERATORS[category](rng)
    return Conversation(category, user, assistant)


def training_corpus(
    n: int, seed: int, categories: Sequence[str] = CATEGORIES, *, start: int = 0, split: str = "train"
) -> list[Conversation]:
    """``n`` conversations, categories round-robin; conversation i comes from key ``{split}/{seed}/{i}``.

    ``start`` skips the first conversations (a training stream resumes where it stopped); ``split`` is
    "train" or "heldout" (the evaluation stream, disjoint from training).
    """
    if split not in ("train", "heldout"):
        raise ValueError(f"unknown split {split!r}; choose train or heldout")
    return [
        sample_conversation(categories[i % len(categories)], random.Random(f"{split}/{seed}/{i}"))
        for i in range(start, start + n)
    ]


def demo_prompts(n: int, seed: int = 0, categories: Iterable[str] | None = None) -> list[Conversation]:
    """``n`` demo conversations (prompt plus reference answer), round-robin over ``categories``.

    Conversation i of category c comes from key ``demo/{seed}/{c}/{i}``, a key space disjoint from training's
    ``train/...`` keys. The reference answer is what the corpus would answer, not what a model says.
    """
    cats = tuple(categories) if categories is not None else CATEGORIES
    for c in cats:
        if c not in _GENERATORS:
            raise ValueError(f"unknown category {c!r}; choose one of: {', '.join(CATEGORIES)}")
    out = []
    for i in range(n):
        c = cats[i % len(cats)]
        out.append(sample_conversation(c, random.Random(f"demo/{seed}/{c}/{i // len(cats)}")))
    return out
