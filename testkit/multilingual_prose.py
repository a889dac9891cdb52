"""Good prose in nine languages (CJK among them; no French: spaCy takes ~20 s to build its French
tokenizer), generated deterministically for filter tests.

Each language has sixteen ordinary sentences written for this file; a document is twelve of them in
a seeded order, three to a paragraph line, so that no document repeats a sentence and every one is
the kind of text a prose filter should keep.
"""

from __future__ import annotations

import random

SENTENCES: dict[str, list[str]] = {
    "en": [
        "The old mill stood beside the river for more than two hundred years.",
        "Every morning the baker opened her shop before the first train arrived.",
        "Children in the village learned to swim in the cold water of the lake.",
        "The library kept a small collection of maps that showed the valley as it once was.",
        "After the storm, the farmers repaired the fences and counted their sheep.",
        "A narrow bridge connected the two halves of the town across the canal.",
        "Most visitors came in summer, when the hills were covered with flowers.",
        "The teacher explained how the water wheel turned the heavy stones inside the mill.",
        "In winter the roads were often closed, and people stayed close to their fires.",
        "My grandfather remembered the day when electricity first reached the farm.",
        "The market on Saturday sold cheese, bread, apples and fresh fish from the coast.",
        "Scientists have studied the birds that return to these marshes every spring.",
        "The museum opened a new room about the history of the railway and its workers.",
        "We walked along the path until the sun disappeared behind the mountains.",
        "Her letters described the city with great care and a quiet sense of humour.",
        "The council decided to plant trees along the main street next year.",
    ],
    "de": [
        "Die alte Mühle stand mehr als zweihundert Jahre lang am Ufer des Flusses.",
        "Jeden Morgen öffnete die Bäckerin ihren Laden, bevor der erste Zug ankam.",
        "Die Kinder im Dorf lernten im kalten Wasser des Sees zu schwimmen.",
        "Die Bibliothek bewahrte eine kleine Sammlung von Karten auf, die das Tal zeigten.",
        "Nach dem Sturm reparierten die Bauern die Zäune und zählten ihre Schafe.",
        "Eine schmale Brücke verband die beiden Hälften der Stadt über den Kanal.",
        "Die meisten Besucher kamen im Sommer, wenn die Hügel voller Blumen waren.",
        "Der Lehrer erklärte, wie das Wasserrad die schweren Steine in der Mühle drehte.",
        "Im Winter waren die Straßen oft gesperrt, und die Leute blieben am Feuer.",
        "Mein Großvater erinnerte sich an den Tag, an dem der Strom zum Hof kam.",
        "Auf dem Markt am Samstag gab es Käse, Brot, Äpfel und frischen Fisch von der Küste.",
        "Forscher haben die Vögel untersucht, die jedes Frühjahr in diese Sümpfe zurückkehren.",
        "Das Museum eröffnete einen neuen Raum über die Geschichte der Eisenbahn und ihrer Arbeiter.",
        "Wir gingen den Weg entlang, bis die Sonne hinter den Bergen verschwand.",
        "Ihre Briefe beschrieben die Stadt mit großer Sorgfalt und einem leisen Humor.",
        "Der Gemeinderat beschloss, im nächsten Jahr Bäume entlang der Hauptstraße zu pflanzen.",
    ],
    "pt": [
        "O velho moinho ficou à beira do rio por mais de duzentos anos.",
        "Todas as manhãs a padeira abria a sua loja antes da chegada do primeiro comboio.",
        "As crianças da aldeia aprendiam a nadar na água fria do lago.",
        "A biblioteca guardava uma pequena coleção de mapas que mostravam o vale de outros tempos.",
        "Depois da tempestade, os agricultores consertaram as cercas e contaram as suas ovelhas.",
        "Uma ponte estreita ligava as duas metades da cidade por cima do canal.",
        "A maioria dos visitantes chegava no verão, quando as colinas estavam cobertas de flores.",
        "O professor explicou como a roda de água fazia girar as pedras pesadas dentro do moinho.",
        "No inverno as estradas ficavam muitas vezes fechadas e as pessoas ficavam junto à lareira.",
        "O meu avô lembrava-se do dia em que a eletricidade chegou pela primeira vez à quinta.",
        "O mercado de sábado vendia queijo, pão, maçãs e peixe fresco da costa.",
        "Os cientistas estudaram as aves que regressam a estes pântanos em cada primavera.",
        "O museu abriu uma nova sala sobre a história do caminho de ferro e dos seus trabalhadores.",
        "Caminhámos pelo trilho até o sol desaparecer atrás das montanhas.",
        "As suas cartas descreviam a cidade com muito cuidado e um discreto sentido de humor.",
        "A câmara decidiu plantar árvores ao longo da rua principal no próximo ano.",
    ],
    "es": [
        "El viejo molino estuvo junto al río durante más de doscientos años.",
        "Cada mañana la panadera abría su tienda antes de que llegara el primer tren.",
        "Los niños del pueblo aprendían a nadar en el agua fría del lago.",
        "La biblioteca guardaba una pequeña colección de mapas que mostraban el valle de antes.",
        "Después de la tormenta, los campesinos repararon las cercas y contaron sus ovejas.",
        "Un puente estrecho unía las dos mitades de la ciudad sobre el canal.",
        "La mayoría de los visitantes venían en verano, cuando las colinas estaban llenas de flores.",
        "El maestro explicó cómo la rueda de agua movía las pesadas piedras dentro del molino.",
        "En invierno los caminos estaban a menudo cerrados y la gente se quedaba junto al fuego.",
        "Mi abuelo recordaba el día en que la electricidad llegó por primera vez a la granja.",
        "El mercado del sábado vendía queso, pan, manzanas y pescado fresco de la costa.",
        "Los científicos han estudiado las aves que vuelven a estos pantanos cada primavera.",
        "El museo abrió una nueva sala sobre la historia del ferrocarril y de sus trabajadores.",
        "Caminamos por el sendero hasta que el sol desapareció detrás de las montañas.",
        "Sus cartas describían la ciudad con mucho cuidado y un tranquilo sentido del humor.",
        "El ayuntamiento decidió plantar árboles a lo largo de la calle principal el próximo año.",
    ],
    "ru": [
        "Старая мельница стояла на берегу реки больше двухсот лет.",
        "Каждое утро пекарь открывала свою лавку до прихода первого поезда.",
        "Дети в деревне учились плавать в холодной воде озера.",
        "В библиотеке хранилась небольшая коллекция карт, на которых была видна прежняя долина.",
        "После бури крестьяне починили заборы и пересчитали своих овец.",
        "Узкий мост соединял две половины города через канал.",
        "Большинство гостей приезжало летом, когда холмы были покрыты цветами.",
        "Учитель объяснил, как водяное колесо вращало тяжёлые камни внутри мельницы.",
        "Зимой дороги часто закрывали, и люди оставались у своих печей.",
        "Мой дед помнил тот день, когда на ферму впервые провели электричество.",
        "На субботнем рынке продавали сыр, хлеб, яблоки и свежую рыбу с побережья.",
        "Учёные изучали птиц, которые каждую весну возвращаются на эти болота.",
        "Музей открыл новый зал об истории железной дороги и её рабочих.",
        "Мы шли по тропе, пока солнце не скрылось за горами.",
        "Её письма описывали город очень внимательно и с тихим чувством юмора.",
        "Городской совет решил в следующем году посадить деревья вдоль главной улицы.",
    ],
    "ja": [
        "古い水車小屋は二百年以上も川のそばに立っている。",
        "毎朝、パン屋の女性は最初の電車が着く前に店を開けました。",
        "村の子どもたちは湖の冷たい水の中で泳ぎを覚えた。",
        "図書館には昔の谷の様子を示す地図が少しだけ保管されている。",
        "嵐のあと、農家の人たちは柵を直して羊の数を数えました。",
        "細い橋が運河をまたいで町の二つの地区をつないでいます。",
        "多くの観光客は丘が花でおおわれる夏にやって来る。",
        "先生は水車が小屋の中の重い石をどのように回すのかを説明しました。",
        "冬には道路がよく閉鎖され、人々は暖炉のそばで過ごした。",
        "祖父は農場に初めて電気が届いた日のことを覚えていました。",
        "土曜日の市場ではチーズやパン、りんご、海岸から届いた魚が売られている。",
        "研究者たちは毎年春にこの湿地へ戻ってくる鳥を調べてきた。",
        "博物館は鉄道とそこで働いた人々の歴史を紹介する新しい部屋を開きました。",
        "私たちは太陽が山の向こうに沈むまで小道を歩いた。",
        "彼女の手紙は町の姿をていねいに、静かなユーモアをこめて描いている。",
        "町の議会は来年、大通りに沿って木を植えることに決めたそうです。",
    ],
    "zh": [
        "这座老磨坊在河边已经矗立了两百多年。",
        "每天早上，面包店的老板娘都会在第一班火车到站之前开门营业。",
        "村里的孩子们在湖水冰冷的季节里学会了游泳。",
        "图书馆里保存着一小批地图，上面画着山谷从前的样子。",
        "暴风雨过后，农民们修好了篱笆，又数了数自己的羊。",
        "一座窄窄的桥横跨运河，把城镇的两半连在一起。",
        "大多数游客在夏天到来，那时山坡上开满了鲜花。",
        "老师向我们解释了水轮是怎样带动磨坊里沉重的石磨转动的。",
        "冬天道路经常封闭，人们只好守在炉火旁边。",
        "我的祖父还记得电第一次通到农场的那一天。",
        "星期六的集市上有奶酪、面包、苹果，还有从海边运来的鲜鱼。",
        "科学家们研究了每年春天飞回这片沼泽的候鸟。",
        "博物馆新开了一个展厅，介绍铁路和铁路工人的历史。",
        "我们沿着小路一直走，直到太阳落到群山后面。",
        "她在信中细致地描写了这座城市，字里行间带着淡淡的幽默。",
        "镇议会决定明年在主街两旁种上树木。",
    ],
    "ko": [
        "오래된 물레방앗간은 이백 년이 넘도록 강가에 서 있었습니다.",
        "빵집 주인은 매일 아침 첫 기차가 도착하기 전에 가게 문을 열었습니다.",
        "마을 아이들은 차가운 호수 물에서 수영을 배웠습니다.",
        "도서관에는 예전 골짜기의 모습을 보여 주는 지도가 조금 보관되어 있었습니다.",
        "폭풍이 지나간 뒤 농부들은 울타리를 고치고 양을 세었습니다.",
        "좁은 다리가 운하를 가로질러 도시의 두 지역을 이어 주었습니다.",
        "대부분의 방문객은 언덕이 꽃으로 덮이는 여름에 찾아왔습니다.",
        "선생님은 물레바퀴가 방앗간 안의 무거운 돌을 어떻게 돌리는지 설명했습니다.",
        "겨울에는 길이 자주 막혀서 사람들은 난롯가에 모여 지냈습니다.",
        "우리 할아버지는 농장에 처음 전기가 들어온 날을 기억하고 계셨습니다.",
        "토요일 시장에서는 치즈와 빵, 사과, 그리고 바닷가에서 온 생선을 팔았습니다.",
        "과학자들은 해마다 봄이면 이 습지로 돌아오는 새들을 연구해 왔습니다.",
        "박물관은 철도와 철도 노동자들의 역사를 다루는 새 전시실을 열었습니다.",
        "우리는 해가 산 뒤로 넘어갈 때까지 오솔길을 따라 걸었습니다.",
        "그녀의 편지는 도시의 모습을 세심하게, 그리고 조용한 유머를 담아 그려 냈습니다.",
        "시의회는 내년에 큰길을 따라 나무를 심기로 결정했습니다.",
    ],
    "ar": [
        "وقفت الطاحونة القديمة بجانب النهر أكثر من مئتي عام.",
        "كانت الخبازة تفتح متجرها كل صباح قبل وصول القطار الأول.",
        "تعلم أطفال القرية السباحة في مياه البحيرة الباردة.",
        "احتفظت المكتبة بمجموعة صغيرة من الخرائط التي تظهر الوادي كما كان في الماضي.",
        "بعد العاصفة أصلح المزارعون الأسوار وعدوا أغنامهم.",
        "كان جسر ضيق يصل بين نصفي المدينة فوق القناة.",
        "جاء معظم الزوار في الصيف عندما كانت التلال مغطاة بالزهور.",
        "شرح المعلم كيف كانت العجلة المائية تدير الحجارة الثقيلة داخل الطاحونة.",
        "في الشتاء كانت الطرق تغلق في كثير من الأحيان وبقي الناس قرب النار.",
        "تذكر جدي اليوم الذي وصلت فيه الكهرباء إلى المزرعة لأول مرة.",
        "كان سوق يوم السبت يبيع الجبن والخبز والتفاح والسمك الطازج من الساحل.",
        "درس العلماء الطيور التي تعود إلى هذه المستنقعات في كل ربيع.",
        "افتتح المتحف قاعة جديدة عن تاريخ السكك الحديدية والعاملين فيها.",
        "مشينا على الطريق حتى اختفت الشمس خلف الجبال.",
        "وصفت رسائلها المدينة بعناية كبيرة وبروح دعابة هادئة.",
        "قرر المجلس البلدي أن يزرع الأشجار على طول الشارع الرئيسي في العام القادم.",
    ],
}
LANGUAGES = tuple(SENTENCES)
SENTENCES_PER_DOCUMENT = 12
PER_LINE = 3


def joiner(language: str) -> str:
    return "" if language in ("ja", "zh") else " "


def document(language: str, rng: random.Random) -> str:
    """Twelve of the language's sentences in a seeded order, three to a line."""
    chosen = rng.sample(SENTENCES[language], SENTENCES_PER_DOCUMENT)
    lines = [joiner(language).join(chosen[i : i + PER_LINE]) for i in range(0, len(chosen), PER_LINE)]
    return "\n".join(lines)


def multilingual_records(per_language: int, seed: int = 0) -> list[dict[str, str]]:
    """`per_language` documents of each language, interleaved: {"id", "text", "language"} records."""
    rng = random.Random(seed)
    return [
        {"id": f"{language}-{i}", "text": document(language, rng), "language": language}
        for i in range(per_language)
        for language in LANGUAGES
    ]
