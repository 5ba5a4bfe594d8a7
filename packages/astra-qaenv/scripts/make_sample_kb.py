"""Regenerate the bundled sample knowledge base (src/astra_qaenv/data/kb/*.jsonl).

A synthetic world across seven domains: fictional names (so a policy cannot answer from
pretraining and must call the tools), seeded so the files are reproducible:

    python packages/astra-qaenv/scripts/make_sample_kb.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "astra_qaenv" / "data" / "kb"
rng = random.Random(20261122)

SYLLABLES = ["va", "lor", "ken", "mir", "tas", "bel", "dor", "fen", "gar", "hal", "ist", "jor", "kal", "len",
             "mar", "nor", "ost", "pel", "quin", "ros", "sel", "tor", "ul", "ven", "wyn", "yar", "zel", "cor",
             "del", "ash", "bri", "cael", "eth", "lin", "mor", "rav"]
FIRST = ["Ada", "Bruno", "Celia", "Dario", "Elin", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Lucan",
         "Mira", "Nils", "Olga", "Pavel", "Rina", "Soren", "Tala", "Umar", "Vera", "Wim", "Yara", "Zeno",
         "Anouk", "Bastian", "Cosima", "Emeric", "Liesel", "Matteo"]
COUNTRIES = ["Valdoria", "Ostmark", "Kesslin", "Maravia", "Tessaly", "Brennholm", "Quorra", "Lunesse",
             "Arvenia", "Dravik", "Sollund", "Yvermoor"]
CURRENCIES = ["valdor", "ostmark crown", "kess", "maravian lira", "tessal", "brenn", "quorran dinar", "lune",
              "arven", "drav", "sol", "yver"]
LANGUAGES = ["Valdorian", "Ostic", "Kesslinese", "Maravian", "Tessalic", "Brennish", "Quorran", "Lunesse",
             "Arvenian", "Dravish", "Sollish", "Yvermoorish"]
CONTINENTS = ["Norreth", "Sudmar", "Estval"]
TIMEZONES = ["UTC+1", "UTC+2", "UTC+3", "UTC-4", "UTC-5", "UTC+8", "UTC+9"]
ADJ = ["Glass", "Silent", "Crimson", "Northern", "Last", "Hollow", "Golden", "Paper", "Iron", "Velvet",
       "Distant", "Broken", "Quiet", "Amber", "Seventh", "Winter"]
NOUN = ["Harbor", "Orchard", "Lantern", "Meridian", "Tide", "Cartographer", "Garden", "Signal", "Compass",
        "Archive", "Bridge", "Comet", "Falcon", "Mirror", "Atlas", "Canal"]
INDUSTRIES = ["logistics", "pharmaceuticals", "consumer electronics", "renewable energy", "media", "banking",
              "food processing", "aerospace"]
PRODUCT_KINDS = [("Aria", "smartphone"), ("Lumen", "e-reader"), ("Strata", "laptop"), ("Pulse", "smartwatch"),
                 ("Tern", "electric scooter"), ("Helio", "solar panel"), ("Brio", "coffee machine"),
                 ("Nimbus", "drone"), ("Quill", "tablet"), ("Vesta", "air purifier")]
GENRES = ["drama", "thriller", "comedy", "documentary", "science fiction", "animation"]
SPECIALTIES = ["cardiology", "oncology", "pediatrics", "orthopedics", "neurology", "general medicine"]
OCCUPATIONS = ["film director", "architect", "physician", "executive", "engineer", "real estate agent",
               "economist", "politician"]


def fresh(make, used: set[str], fits=lambda name: True) -> str:
    """A name from `make()` not in `used` (and that `fits`), recorded as used."""
    while True:
        name = make()
        if fits(name) and name not in used:
            used.add(name)
            return name


def place_name(used: set[str]) -> str:
    return fresh(lambda: "".join(rng.sample(SYLLABLES, rng.choice([2, 2, 3]))).capitalize(), used,
                 lambda name: 4 <= len(name) <= 10)


def person_name(used: set[str]) -> str:
    return fresh(lambda: f"{rng.choice(FIRST)} {place_name(set())}", used)


def title(used: set[str]) -> str:
    return fresh(lambda: f"The {rng.choice(ADJ)} {rng.choice(NOUN)}", used)


def main() -> None:
    entities: list[dict] = []
    relations: list[dict] = []
    names: set[str] = set()

    def entity(kind: str, name: str, domain: str, **attributes) -> str:
        key = f"{kind}/{name.lower().replace(' ', '-')}"
        entities.append({"id": key, "type": kind, "name": name, "domain": domain, "attributes": attributes})
        return key

    def relate(subject: str, relation: str, obj: str) -> None:
        relations.append({"subject": subject, "relation": relation, "object": obj})

    countries = [entity("country", name, "geography", population=rng.randrange(800_000, 90_000_000, 1000),
                        area_km2=rng.randrange(9_000, 900_000, 10), currency=CURRENCIES[i],
                        official_language=LANGUAGES[i], continent=rng.choice(CONTINENTS))
                 for i, name in enumerate(COUNTRIES)]
    cities = []
    for country in countries:
        for _ in range(3):
            city = entity("city", place_name(names), "geography", population=rng.randrange(40_000, 4_000_000, 100),
                          founded_year=rng.randrange(820, 1890), elevation_m=rng.randrange(2, 1900),
                          timezone=rng.choice(TIMEZONES))
            relate(city, "country", country)
            cities.append(city)
        relate(country, "capital", cities[-3])
        relate(country, "largest_city", rng.choice(cities[-3:]))
    people_names: set[str] = set()
    people = [entity("person", person_name(people_names), "people", birth_year=rng.randrange(1940, 1998),
                     occupation=rng.choice(OCCUPATIONS)) for _ in range(48)]
    for person in people:
        relate(person, "birthplace", rng.choice(cities))
    for city in cities:
        relate(city, "mayor", rng.choice(people))
    company_names: set[str] = set()
    companies = []
    for _ in range(16):
        name = place_name(company_names | names) + rng.choice([" Industries", " Group", " Systems", " Holdings"])
        companies.append(entity("company", name, "business", founded_year=rng.randrange(1850, 2020),
                                revenue_musd=rng.randrange(40, 90_000), employees=rng.randrange(120, 250_000, 10),
                                industry=rng.choice(INDUSTRIES)))
    for company in companies:
        relate(company, "headquarters", rng.choice(cities))
        relate(company, "ceo", rng.choice(people))
    for person in people:
        relate(person, "employer", rng.choice(companies))
    for i, (brand, kind) in enumerate(PRODUCT_KINDS + PRODUCT_KINDS[:6]):
        product = entity("product", f"{brand} {rng.choice(['X', 'Pro', 'Mini', 'Max', 'S'])}{i + 2}", "e-commerce",
                         price_usd=rng.randrange(39, 2400), launch_year=rng.randrange(2012, 2026), category=kind)
        relate(product, "manufacturer", rng.choice(companies))
    film_names: set[str] = set()
    for _ in range(18):
        film = entity("film", title(film_names), "film", release_year=rng.randrange(1962, 2026),
                      runtime_min=rng.randrange(78, 191), box_office_musd=rng.randrange(1, 1400),
                      genre=rng.choice(GENRES))
        relate(film, "director", rng.choice(people))
        relate(film, "studio", rng.choice(companies))
        relate(film, "filming_location", rng.choice(cities))
    agencies = []
    for _ in range(6):
        agency = entity("agency", place_name(names) + " Realty", "real estate", founded_year=rng.randrange(1950, 2022),
                        active_listings=rng.randrange(12, 900))
        relate(agency, "headquarters", rng.choice(cities))
        agencies.append(agency)
    streets = ["Harbor Lane", "Mill Road", "Cedar Row", "Quay Street", "Orchard Way", "Bell Court", "Lark Avenue",
               "Stone Walk"]
    for i in range(18):
        home = entity("property", f"{rng.randrange(1, 240)} {streets[i % len(streets)]}, Unit {i + 1}",
                      "real estate", price_usd=rng.randrange(90_000, 3_500_000, 500), bedrooms=rng.randrange(1, 7),
                      floor_area_m2=rng.randrange(28, 420), year_built=rng.randrange(1890, 2025))
        relate(home, "located_in", rng.choice(cities))
        relate(home, "listing_agency", rng.choice(agencies))
        relate(home, "listing_agent", rng.choice(people))
    for _ in range(10):
        hospital = entity("hospital", f"{place_name(names)} {rng.choice(['General', 'University', 'Memorial'])} Hospital",
                          "healthcare", beds=rng.randrange(40, 2200), founded_year=rng.randrange(1820, 2015),
                          specialty=rng.choice(SPECIALTIES))
        relate(hospital, "located_in", rng.choice(cities))
        relate(hospital, "chief_physician", rng.choice(people))

    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("entities", entities), ("relations", relations), ("schema", SCHEMA)):
        with open(OUT / f"{name}.jsonl", "w") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(entities)} entities, {len(relations)} relations, {len(SCHEMA)} schema rows -> {OUT}")
    write_knowledge(entities, relations)


def write_knowledge(entities: list[dict], relations: list[dict]) -> None:
    """ASTRA-format knowledge rows grounded in the same world, for the LLM synthesis path."""
    by_id = {e["id"]: e for e in entities}
    rel = {(r["subject"], r["relation"]): by_id[r["object"]] for r in relations}
    rows = []
    for country in [e for e in entities if e["type"] == "country"][:4]:
        a = country["attributes"]
        capital = rel[(country["id"], "capital")]
        ca = capital["attributes"]
        mayor = rel[(capital["id"], "mayor")]
        rows.append({"domain": "geography", "knowledge_corpus": (
            f"{country['name']} is a country in {a['continent']} with {a['population']} inhabitants and an area of "
            f"{a['area_km2']} km2. Its currency is the {a['currency']} and its official language is "
            f"{a['official_language']}. The capital, {capital['name']}, was founded in {ca['founded_year']}, has "
            f"{ca['population']} inhabitants, lies {ca['elevation_m']} m above sea level and is governed by mayor "
            f"{mayor['name']}, born in {mayor['attributes']['birth_year']}.")})
    for film in [e for e in entities if e["type"] == "film"][:2]:
        a = film["attributes"]
        director = rel[(film["id"], "director")]
        studio = rel[(film["id"], "studio")]
        rows.append({"domain": "film", "knowledge_corpus": (
            f"{film['name']} is a {a['genre']} released in {a['release_year']} ({a['runtime_min']} minutes), "
            f"directed by {director['name']} (born {director['attributes']['birth_year']}) and produced by "
            f"{studio['name']}, a {studio['attributes']['industry']} company founded in "
            f"{studio['attributes']['founded_year']}. It grossed {a['box_office_musd']} million USD.")})
    countries = [e for e in entities if e["type"] == "country"]
    questions = [
        {"question": f"What is the population of the capital of {countries[0]['name']}?", "domain": "geography"},
        {"question": f"Which country has more inhabitants, {countries[1]['name']} or {countries[2]['name']}?",
         "domain": "geography"},
        {"question": "Which currency would I need in the largest city of "
                     f"{countries[3]['name']}, and who is its mayor?", "domain": "geography"},
    ]
    knowledge = OUT.parent / "knowledge"
    knowledge.mkdir(parents=True, exist_ok=True)
    for name, items in (("domains", rows), ("questions", questions)):
        with open(knowledge / f"{name}.jsonl", "w") as handle:
            for row in items:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def field(kind, name, phrase, description, *, compare=None, lower_wins=False, who=False):
    row = {"type": kind, "field": name, "phrase": phrase, "description": description}
    if who:
        row["question"] = f"Who is {phrase}?"
    if compare:
        row["compare"] = compare
        row["lower_wins"] = lower_wins
    return row


# How each field reads in questions and what its lookup tool is called; the rest is defaulted.
SCHEMA = [
    field("country", "population", "the population of {name}", "Population (inhabitants) of a country.",
          compare="Which has the larger population: {a} or {b}?"),
    field("country", "area_km2", "the area in square kilometres of {name}", "Land area of a country in km².",
          compare="Which is larger by area: {a} or {b}?"),
    field("country", "currency", "the currency of {name}", "Official currency of a country."),
    field("country", "official_language", "the official language of {name}", "Official language of a country."),
    field("country", "continent", "the continent {name} is on", "Continent a country lies on."),
    field("country", "capital", "the capital of {name}", "Capital city of a country."),
    field("country", "largest_city", "the largest city of {name}", "Largest city (by population) of a country."),
    field("city", "population", "the population of {name}", "Population (inhabitants) of a city.",
          compare="Which has the larger population: {a} or {b}?"),
    field("city", "founded_year", "the year {name} was founded", "Year a city was founded.",
          compare="Which was founded earlier: {a} or {b}?", lower_wins=True),
    field("city", "elevation_m", "the elevation in metres of {name}", "Elevation of a city above sea level in metres.",
          compare="Which lies higher: {a} or {b}?"),
    field("city", "timezone", "the time zone of {name}", "Time zone (UTC offset) of a city."),
    field("city", "country", "the country {name} is in", "Country a city belongs to."),
    field("city", "mayor", "the mayor of {name}", "Current mayor of a city.", who=True),
    field("person", "birth_year", "the birth year of {name}", "Year a person was born.",
          compare="Who was born earlier: {a} or {b}?", lower_wins=True),
    field("person", "occupation", "the occupation of {name}", "Occupation of a person."),
    field("person", "birthplace", "the birthplace of {name}", "City a person was born in."),
    field("person", "employer", "the employer of {name}", "Company a person works for."),
    field("company", "founded_year", "the year {name} was founded", "Year a company was founded.",
          compare="Which was founded earlier: {a} or {b}?", lower_wins=True),
    field("company", "revenue_musd", "the annual revenue in million USD of {name}",
          "Annual revenue of a company in million US dollars.", compare="Which has the higher revenue: {a} or {b}?"),
    field("company", "employees", "the number of employees of {name}", "Number of employees of a company.",
          compare="Which has more employees: {a} or {b}?"),
    field("company", "industry", "the industry of {name}", "Industry a company operates in."),
    field("company", "headquarters", "the headquarters city of {name}", "City where a company is headquartered."),
    field("company", "ceo", "the CEO of {name}", "Chief executive officer of a company.", who=True),
    field("product", "price_usd", "the price in USD of {name}", "Retail price of a product in US dollars.",
          compare="Which is more expensive: {a} or {b}?"),
    field("product", "launch_year", "the launch year of {name}", "Year a product was launched.",
          compare="Which was launched earlier: {a} or {b}?", lower_wins=True),
    field("product", "category", "the product category of {name}", "Category of a product."),
    field("product", "manufacturer", "the manufacturer of {name}", "Company that makes a product."),
    field("film", "release_year", "the release year of {name}", "Year a film was released.",
          compare="Which was released earlier: {a} or {b}?", lower_wins=True),
    field("film", "runtime_min", "the runtime in minutes of {name}", "Running time of a film in minutes.",
          compare="Which is longer: {a} or {b}?"),
    field("film", "box_office_musd", "the box office gross in million USD of {name}",
          "Worldwide box office gross of a film in million US dollars.",
          compare="Which grossed more at the box office: {a} or {b}?"),
    field("film", "genre", "the genre of {name}", "Genre of a film."),
    field("film", "director", "the director of {name}", "Director of a film.", who=True),
    field("film", "studio", "the studio that produced {name}", "Studio (company) that produced a film."),
    field("film", "filming_location", "the main filming location of {name}", "City where a film was mainly shot."),
    field("agency", "founded_year", "the year {name} was founded", "Year a real estate agency was founded.",
          compare="Which was founded earlier: {a} or {b}?", lower_wins=True),
    field("agency", "active_listings", "the number of active listings of {name}",
          "Number of active listings of a real estate agency.", compare="Which has more active listings: {a} or {b}?"),
    field("agency", "headquarters", "the headquarters city of {name}", "City where a real estate agency is based."),
    field("property", "price_usd", "the asking price in USD of {name}", "Asking price of a listed property in US dollars.",
          compare="Which is more expensive: {a} or {b}?"),
    field("property", "bedrooms", "the number of bedrooms of {name}", "Number of bedrooms of a listed property.",
          compare="Which has more bedrooms: {a} or {b}?"),
    field("property", "floor_area_m2", "the floor area in square metres of {name}",
          "Floor area of a listed property in m².", compare="Which has the larger floor area: {a} or {b}?"),
    field("property", "year_built", "the year {name} was built", "Year a property was built.",
          compare="Which was built earlier: {a} or {b}?", lower_wins=True),
    field("property", "located_in", "the city where {name} is located", "City a listed property is in."),
    field("property", "listing_agency", "the agency listing {name}", "Real estate agency that lists a property."),
    field("property", "listing_agent", "the listing agent of {name}", "Agent responsible for a property listing.", who=True),
    field("hospital", "beds", "the number of beds of {name}", "Number of inpatient beds of a hospital.",
          compare="Which has more beds: {a} or {b}?"),
    field("hospital", "founded_year", "the year {name} was founded", "Year a hospital was founded.",
          compare="Which was founded earlier: {a} or {b}?", lower_wins=True),
    field("hospital", "specialty", "the main specialty of {name}", "Main clinical specialty of a hospital."),
    field("hospital", "located_in", "the city where {name} is located", "City a hospital is in."),
    field("hospital", "chief_physician", "the chief physician of {name}", "Chief physician of a hospital.", who=True),
]

if __name__ == "__main__":
    main()
