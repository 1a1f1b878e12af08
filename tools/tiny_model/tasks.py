"""Hand-written training material for the tiny model: small everyday Python functions with several
phrasings of their request, and the tools (OpenAI format) its tool-call turns use."""

# (request phrasings, code). Requests are full sentences; code is the whole answer's code block.
SIMPLE_FUNCTIONS = [
    (["Write a Python function that reverses a string.", "Reverse a string in Python.",
      "Write a function reverse_string(s) that returns s reversed."],
     "def reverse_string(s):\n    return s[::-1]"),
    (["Write a Python function that returns the sum of a list of numbers.", "Sum the numbers in a list.",
      "Write a function total(numbers) that adds up a list."],
     "def total(numbers):\n    result = 0\n    for n in numbers:\n        result += n\n    return result"),
    (["Write a Python function that checks whether a number is even.", "Is a number even? Write a Python function.",
      "Write a function is_even(n)."],
     "def is_even(n):\n    return n % 2 == 0"),
    (["Write a Python function that computes the factorial of n.", "Compute n factorial in Python.",
      "Write a recursive factorial function."],
     "def factorial(n):\n    if n <= 1:\n        return 1\n    return n * factorial(n - 1)"),
    (["Write a Python function that returns the n-th Fibonacci number.", "Compute Fibonacci numbers in Python.",
      "Write a function fib(n)."],
     "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a"),
    (["Write a Python function that returns the largest item of a list.", "Find the maximum of a list in Python.",
      "Write a function largest(items) without using max()."],
     "def largest(items):\n    best = items[0]\n    for item in items[1:]:\n        if item > best:\n            best = item\n    return best"),
    (["Write a Python function that counts the vowels in a string.", "Count vowels in a string.",
      "Write a function count_vowels(text)."],
     "def count_vowels(text):\n    return sum(1 for ch in text.lower() if ch in \"aeiou\")"),
    (["Write a Python function that checks whether a string is a palindrome.", "Is a word a palindrome? Write it in Python.",
      "Write a function is_palindrome(s)."],
     "def is_palindrome(s):\n    s = s.lower()\n    return s == s[::-1]"),
    (["Write a Python function that checks whether a number is prime.", "Test if n is prime in Python.",
      "Write a function is_prime(n)."],
     "def is_prime(n):\n    if n < 2:\n        return False\n    for i in range(2, int(n ** 0.5) + 1):\n        if n % i == 0:\n            return False\n    return True"),
    (["Write a Python function that removes duplicates from a list, keeping the order.", "Remove duplicate items from a list.",
      "Write a function unique(items) that keeps the first of each value."],
     "def unique(items):\n    seen = set()\n    result = []\n    for item in items:\n        if item not in seen:\n            seen.add(item)\n            result.append(item)\n    return result"),
    (["Write a Python function that converts Celsius to Fahrenheit.", "Convert a temperature from Celsius to Fahrenheit.",
      "Write a function celsius_to_fahrenheit(c)."],
     "def celsius_to_fahrenheit(c):\n    return c * 9 / 5 + 32"),
    (["Write a Python function that counts how often each word appears in a text.", "Count words in a string.",
      "Write a function word_counts(text) that returns a dict."],
     "def word_counts(text):\n    counts = {}\n    for word in text.split():\n        counts[word] = counts.get(word, 0) + 1\n    return counts"),
    (["Write a Python function that flattens a list of lists.", "Flatten a nested list one level deep.",
      "Write a function flatten(lists)."],
     "def flatten(lists):\n    return [x for sub in lists for x in sub]"),
    (["Write a Python function that returns the average of a list.", "Compute the mean of a list of numbers.",
      "Write a function mean(values)."],
     "def mean(values):\n    if not values:\n        raise ValueError(\"mean of empty list\")\n    return sum(values) / len(values)"),
    (["Write a Python function that reads a file and returns its lines.", "Read all lines of a text file in Python.",
      "Write a function read_lines(path)."],
     "def read_lines(path):\n    with open(path, encoding=\"utf-8\") as f:\n        return [line.rstrip(\"\\n\") for line in f]"),
    (["Write a Python function that merges two sorted lists.", "Merge two sorted lists into one sorted list.",
      "Write a function merge(a, b)."],
     "def merge(a, b):\n    i = j = 0\n    out = []\n    while i < len(a) and j < len(b):\n        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n        else:\n            out.append(b[j])\n            j += 1\n    return out + a[i:] + b[j:]"),
    (["Write a Python function for binary search in a sorted list.", "Find an item in a sorted list with binary search.",
      "Write a function binary_search(items, target) that returns the index or -1."],
     "def binary_search(items, target):\n    lo, hi = 0, len(items) - 1\n    while lo <= hi:\n        mid = (lo + hi) // 2\n        if items[mid] == target:\n            return mid\n        if items[mid] < target:\n            lo = mid + 1\n        else:\n            hi = mid - 1\n    return -1"),
    (["Write a Python function that returns the greatest common divisor of two numbers.", "Compute the gcd of a and b.",
      "Write a function gcd(a, b) with Euclid's algorithm."],
     "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a"),
    (["Write a Python function that capitalizes every word in a sentence.", "Title-case a sentence in Python.",
      "Write a function capitalize_words(text)."],
     "def capitalize_words(text):\n    return \" \".join(word.capitalize() for word in text.split())"),
    (["Write a Python function that returns the squares of the numbers in a list.", "Square every number in a list.",
      "Write a function squares(numbers)."],
     "def squares(numbers):\n    return [n * n for n in numbers]"),
    (["Write a Python function that sorts a list of dictionaries by a key.", "Sort a list of dicts by one field.",
      "Write a function sort_by(records, key)."],
     "def sort_by(records, key):\n    return sorted(records, key=lambda r: r[key])"),
    (["Write a Python function that checks whether two strings are anagrams.", "Are two words anagrams? Write it in Python.",
      "Write a function is_anagram(a, b)."],
     "def is_anagram(a, b):\n    return sorted(a.lower()) == sorted(b.lower())"),
    (["Write a Python function that returns the minimum and maximum of a list.", "Find the smallest and largest values in a list.",
      "Write a function min_max(values)."],
     "def min_max(values):\n    return min(values), max(values)"),
    (["Write a Python function that counts the lines in a file.", "Count lines of a text file.",
      "Write a function count_lines(path)."],
     "def count_lines(path):\n    with open(path) as f:\n        return sum(1 for _ in f)"),
    (["Write a Python class for a stack.", "Implement a stack with push and pop in Python.",
      "Write a class Stack."],
     "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self.items.append(item)\n\n    def pop(self):\n        return self.items.pop()\n\n    def is_empty(self):\n        return not self.items"),
    (["Write a Python function that returns the digits of a number as a list.", "Split an integer into its digits.",
      "Write a function digits(n)."],
     "def digits(n):\n    return [int(d) for d in str(abs(n))]"),
    (["Write a Python function that joins a list of strings with commas.", "Join words with a comma and a space.",
      "Write a function join_words(words)."],
     "def join_words(words):\n    return \", \".join(words)"),
    (["Write a Python function that returns the n first prime numbers.", "List the first n primes.",
      "Write a function first_primes(n)."],
     "def first_primes(n):\n    primes = []\n    k = 2\n    while len(primes) < n:\n        if all(k % p for p in primes):\n            primes.append(k)\n        k += 1\n    return primes"),
    (["Write a Python function that swaps the keys and values of a dictionary.", "Invert a dict in Python.",
      "Write a function invert(d)."],
     "def invert(d):\n    return {v: k for k, v in d.items()}"),
    (["Write a Python function that checks whether a year is a leap year.", "Is a year a leap year? Write a Python function.",
      "Write a function is_leap(year)."],
     "def is_leap(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)"),
]

SHORT_ANSWERS = [
    (["Hello!", "Hi", "Hello, who are you?", "Hi there!"],
     "Hello! I am a tiny code model. Ask me for a small Python function."),
    (["What can you do?", "What are you good at?", "Help"],
     "I write small Python functions. Try: \"Write a Python function that reverses a string.\""),
    (["Thanks!", "Thank you.", "Great, thanks."], "You're welcome!"),
    (["What is Python?", "Tell me about Python."],
     "Python is a programming language with a clear syntax and a large standard library."),
]

CITIES = ["Paris", "London", "Tokyo", "Berlin", "Madrid", "Rome", "Lisbon", "Oslo", "Cairo", "Lima", "Toronto",
          "Sydney", "Seoul", "Mumbai", "Nairobi", "Chicago", "Boston", "Vienna", "Prague", "Dublin"]
TIMEZONES = ["Europe/Paris", "Asia/Tokyo", "America/New_York", "Europe/London", "Australia/Sydney", "UTC",
             "America/Chicago", "Asia/Kolkata"]
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF", "CAD"]
SYMBOLS = ["AAPL", "GOOG", "MSFT", "NVDA", "AMZN", "TSLA"]
TOPICS = ["python decorators", "binary search", "the history of Rome", "how rainbows form", "unit testing",
          "sourdough bread", "the speed of light", "jazz music", "linked lists", "solar panels"]
LANGUAGES = ["French", "German", "Spanish", "Japanese", "Italian"]
PHRASES = ["good morning", "thank you very much", "where is the station", "I like coffee", "see you tomorrow"]
EXPRESSIONS = ["2 + 2", "17 * 23", "(4 + 5) * 3", "100 / 8", "2 ** 10", "365 * 24", "81 - 19"]
NAMES = ["alice@example.com", "bob@example.com", "carol@example.org", "dave@example.net"]
FILES = ["notes.txt", "README.md", "config.json", "data/input.csv", "src/main.py"]

TOOLS = {
    "get_weather": {
        "description": "Get the current weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}},
            "required": ["city"]}},
    "get_time": {
        "description": "Get the current time in a time zone.",
        "parameters": {"type": "object", "properties": {
            "timezone": {"type": "string", "description": "IANA time zone, e.g. Europe/Paris"}},
            "required": ["timezone"]}},
    "convert_currency": {
        "description": "Convert an amount of money between currencies.",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number", "description": "Amount to convert"},
            "from_currency": {"type": "string", "description": "Currency code to convert from"},
            "to_currency": {"type": "string", "description": "Currency code to convert to"}},
            "required": ["amount", "from_currency", "to_currency"]}},
    "search_web": {
        "description": "Search the web and return the top results.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "Search query"}},
            "required": ["query"]}},
    "calculate": {
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {
            "expression": {"type": "string", "description": "The expression, e.g. 2 * (3 + 4)"}},
            "required": ["expression"]}},
    "get_stock_price": {
        "description": "Get the latest price of a stock.",
        "parameters": {"type": "object", "properties": {
            "symbol": {"type": "string", "description": "Ticker symbol"}},
            "required": ["symbol"]}},
    "send_email": {
        "description": "Send an email.",
        "parameters": {"type": "object", "properties": {
            "to": {"type": "string", "description": "Recipient address"},
            "subject": {"type": "string", "description": "Subject line"},
            "body": {"type": "string", "description": "Message text"}},
            "required": ["to", "subject", "body"]}},
    "translate": {
        "description": "Translate text into another language.",
        "parameters": {"type": "object", "properties": {
            "text": {"type": "string", "description": "Text to translate"},
            "target_language": {"type": "string", "description": "Language to translate into"}},
            "required": ["text", "target_language"]}},
    "read_file": {
        "description": "Read a text file from the workspace.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "File path"}},
            "required": ["path"]}},
}


def tool_spec(name):
    return {"type": "function", "function": {"name": name, **TOOLS[name]}}


def tool_requests(rng):
    """One (tool name, user request, arguments, tool result, final answer) drawn at random."""
    kind = rng.choice(sorted(TOOLS))
    if kind == "get_weather":
        city = rng.choice(CITIES)
        req = rng.choice(["What's the weather in {c}?", "What is the weather like in {c} today?",
                          "Is it raining in {c}?", "How warm is it in {c}?", "Weather in {c}, please."]).format(c=city)
        args = {"city": city}
        if rng.random() < 0.3:
            args["unit"] = rng.choice(["celsius", "fahrenheit"])
            req = req.rstrip("?.") + " in " + args["unit"] + "?"
        t = rng.randint(-5, 35)
        return kind, req, args, {"temperature": t, "condition": rng.choice(["sunny", "cloudy", "rainy"])}, \
            "It is %d degrees in %s right now." % (t, city)
    if kind == "get_time":
        tz = rng.choice(TIMEZONES)
        req = rng.choice(["What time is it in {t}?", "Tell me the current time in {t}.", "Current time in {t}?"]).format(t=tz)
        h, m = rng.randint(0, 23), rng.randint(0, 59)
        return kind, req, {"timezone": tz}, {"time": "%02d:%02d" % (h, m)}, "It is %02d:%02d in %s." % (h, m, tz)
    if kind == "convert_currency":
        amount = rng.choice([5, 10, 20, 50, 100, 250, 1000])
        a, b = rng.sample(CURRENCIES, 2)
        req = rng.choice(["Convert {n} {a} to {b}.", "How much is {n} {a} in {b}?", "What are {n} {a} in {b}?"]).format(n=amount, a=a, b=b)
        res = round(amount * rng.uniform(0.5, 1.5), 2)
        return kind, req, {"amount": amount, "from_currency": a, "to_currency": b}, {"result": res}, \
            "%s %s is about %s %s." % (amount, a, res, b)
    if kind == "search_web":
        topic = rng.choice(TOPICS)
        req = rng.choice(["Search the web for {t}.", "Look up {t} online.", "Find information about {t}."]).format(t=topic)
        return kind, req, {"query": topic}, {"results": ["A guide to " + topic]}, "I found a guide to %s." % topic
    if kind == "calculate":
        e = rng.choice(EXPRESSIONS)
        req = rng.choice(["Calculate {e}.", "What is {e}?", "Use the calculator for {e}."]).format(e=e)
        return kind, req, {"expression": e}, {"value": eval(e)}, "%s = %s" % (e, eval(e))  # noqa: S307
    if kind == "get_stock_price":
        s = rng.choice(SYMBOLS)
        req = rng.choice(["What is the stock price of {s}?", "How is {s} trading?", "Get me the price of {s}."]).format(s=s)
        p = round(rng.uniform(50, 900), 2)
        return kind, req, {"symbol": s}, {"price": p}, "%s is trading at %s." % (s, p)
    if kind == "send_email":
        to = rng.choice(NAMES)
        subj = rng.choice(["Meeting", "Lunch", "Report", "Hello"])
        body = rng.choice(["See you at noon.", "The report is ready.", "Can we meet tomorrow?"])
        req = "Send an email to %s with the subject \"%s\" saying: %s" % (to, subj, body)
        return kind, req, {"to": to, "subject": subj, "body": body}, {"status": "sent"}, "The email to %s was sent." % to
    if kind == "translate":
        lang = rng.choice(LANGUAGES)
        ph = rng.choice(PHRASES)
        req = rng.choice(["Translate \"{p}\" into {l}.", "How do you say \"{p}\" in {l}?"]).format(p=ph, l=lang)
        return kind, req, {"text": ph, "target_language": lang}, {"translation": "..."}, "The translation is ready."
    path = rng.choice(FILES)
    req = rng.choice(["Read the file {p}.", "Show me what is in {p}.", "Open {p} and show it."]).format(p=path)
    return "read_file", req, {"path": path}, {"content": "..."}, "Here is the content of %s." % path
