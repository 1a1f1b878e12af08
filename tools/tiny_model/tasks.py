"""Hand-written training material for the tiny model: short chat answers, and the tools (OpenAI format)
its tool-call turns use (the small Python functions are in code_tasks.py)."""

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
